package dashboard

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// pageQuery reads a GET page's query string (HTML and /api/ alike) and
// refuses, with a 400 naming the culprit: a query string that does not
// parse (r.URL.Query() drops such pairs silently, so `?state=x;y` listed
// every job), a parameter the page does not take (`cursor=` for `before=`
// would be ignored the same way), a parameter given twice, and a value
// that is not text (see checkText). params are the parameters the page
// takes (repeatable(name) for one it takes several times); empty form
// fields are fine.
func pageQuery(r *http.Request, params ...string) (url.Values, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequestf("invalid query string %q: %v", truncateUTF8(r.URL.RawQuery, 200), err)
	}
	// In order, so the same query gets the same message.
	for _, key := range slices.Sorted(maps.Keys(v)) {
		switch {
		case !slices.Contains(params, key) && !slices.Contains(params, repeatable(key)) && len(params) == 0:
			return nil, badRequestf("unknown parameter %q: this page takes no parameters", key)
		case !slices.Contains(params, key) && !slices.Contains(params, repeatable(key)):
			return nil, badRequestf("unknown parameter %q: this page takes %s", key, strings.Join(params, ", "))
		case len(v[key]) > 1 && !slices.Contains(params, repeatable(key)):
			return nil, badRequestf("parameter %q given %d times: give it once", key, len(v[key]))
		}
		for _, val := range v[key] {
			if err := checkText(key, val); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// repeatable names a parameter pageQuery takes more than once.
func repeatable(name string) string { return name + "..." }

// checkText refuses a value Postgres cannot hold in a text parameter
// (invalid UTF-8, NUL: it would answer 500 with its own error) and other
// control characters, which no name in tributary's tables contains.
func checkText(param, value string) error {
	if !utf8.ValidString(value) {
		return badRequestf("invalid %s %q: not UTF-8 text", param, truncateUTF8(value, 64))
	}
	if strings.IndexFunc(value, unicode.IsControl) >= 0 {
		return badRequestf("invalid %s %q: contains a control character", param, truncateUTF8(value, 64))
	}
	return nil
}
