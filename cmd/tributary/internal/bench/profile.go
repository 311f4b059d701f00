package bench

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// CPUProfile is a CPU profile being written for one benchmark run
// (`tributary bench ... --cpuprofile FILE`).
type CPUProfile struct {
	path  string
	f     *os.File
	start time.Time
	// Wall is how long the profile ran, set by Stop.
	Wall time.Duration
}

// StartCPUProfile starts writing a CPU profile of this process to path.
func StartCPUProfile(path string) (*CPUProfile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return &CPUProfile{path: path, f: f, start: time.Now()}, nil
}

// Stop ends the profile, closes its file, and returns the top functions of
// what it recorded (see TopFunctions).
func (p *CPUProfile) Stop(top int) ([]FuncTime, time.Duration, error) {
	pprof.StopCPUProfile()
	p.Wall = time.Since(p.start)
	if err := p.f.Close(); err != nil {
		return nil, 0, err
	}
	b, err := os.ReadFile(p.path)
	if err != nil {
		return nil, 0, err
	}
	return TopFunctions(b, top)
}

// FuncTime is one function's share of a CPU profile: Flat is the time
// spent in the function itself, Cum in it and what it called.
type FuncTime struct {
	Name string        `json:"name"`
	Flat time.Duration `json:"flat_ns"`
	Cum  time.Duration `json:"cum_ns"`
}

// TopFunctions reads a CPU profile as runtime/pprof writes it (gzipped
// profile.proto) and returns the top functions by flat time, at most top
// of them, and the total CPU time sampled. It decodes the few fields it
// needs itself (samples, locations with their lines, functions, the string
// table), so the binary carries no profile library and needs no `go tool
// pprof` at run time.
func TopFunctions(gz []byte, top int) ([]FuncTime, time.Duration, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, 0, fmt.Errorf("error reading the CPU profile: %w", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, 0, fmt.Errorf("error reading the CPU profile: %w", err)
	}
	p, err := decodeProfile(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("error decoding the CPU profile: %w", err)
	}
	return p.top(top)
}

type profSample struct {
	locations []uint64
	values    []int64
}

type profile struct {
	sampleTypes [][2]int64 // (type, unit) string indexes
	samples     []profSample
	locFuncs    map[uint64][]uint64 // location id -> function ids, innermost first
	funcNames   map[uint64]int64    // function id -> name string index
	strings     []string
}

func (p *profile) str(i int64) string {
	if i < 0 || int(i) >= len(p.strings) {
		return "?"
	}
	return p.strings[i]
}

func (p *profile) top(n int) ([]FuncTime, time.Duration, error) {
	// The CPU time is the value whose type is "cpu" (nanoseconds); samples
	// otherwise.
	vi := -1
	for i, st := range p.sampleTypes {
		if p.str(st[0]) == "cpu" && p.str(st[1]) == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return nil, 0, errors.New("the profile has no cpu/nanoseconds values")
	}
	flat, cum := map[string]int64{}, map[string]int64{}
	var total int64
	for _, s := range p.samples {
		if vi >= len(s.values) {
			continue
		}
		v := s.values[vi]
		total += v
		seen := map[string]bool{}
		for i, loc := range s.locations {
			for j, fid := range p.locFuncs[loc] {
				name := p.str(p.funcNames[fid])
				if i == 0 && j == 0 {
					flat[name] += v
				}
				if !seen[name] {
					seen[name] = true
					cum[name] += v
				}
			}
		}
	}
	out := make([]FuncTime, 0, len(flat))
	for name, v := range flat {
		out = append(out, FuncTime{Name: name, Flat: time.Duration(v), Cum: time.Duration(cum[name])})
	}
	slices.SortFunc(out, func(a, b FuncTime) int {
		if a.Flat != b.Flat {
			return int(b.Flat - a.Flat)
		}
		return strings.Compare(a.Name, b.Name)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out, time.Duration(total), nil
}

// WriteTop prints the top functions of a profile that ran for wall (0:
// unknown), with the share of the total each one took.
func WriteTop(w io.Writer, path string, wall time.Duration, funcs []FuncTime, total time.Duration) {
	share := ""
	if wall > 0 {
		share = fmt.Sprintf(" in %.2fs (%.0f%% of one core: the rest of the wall time this process waited, on Postgres, the broker or the disk)", wall.Seconds(), pct(total, wall))
	}
	fmt.Fprintf(w, "cpu profile %s: %.2fs of CPU sampled%s; top %d functions by own time (flat, flat%%, cum%%):\n", path, total.Seconds(), share, len(funcs))
	for _, f := range funcs {
		fmt.Fprintf(w, "  %8.2fs %5.1f%% %5.1f%%  %s\n", f.Flat.Seconds(), pct(f.Flat, total), pct(f.Cum, total), f.Name)
	}
}

func pct(d, total time.Duration) float64 {
	if total <= 0 {
		return 0
	}
	return 100 * float64(d) / float64(total)
}

// decodeProfile decodes the fields of profile.proto that top needs.
func decodeProfile(b []byte) (*profile, error) {
	p := &profile{locFuncs: map[uint64][]uint64{}, funcNames: map[uint64]int64{}}
	return p, walkFields(b, func(field int, wire int, v uint64, data []byte) error {
		switch field {
		case 1: // sample_type
			var st [2]int64
			err := walkFields(data, func(f, _ int, v uint64, _ []byte) error {
				if f == 1 || f == 2 {
					st[f-1] = int64(v)
				}
				return nil
			})
			p.sampleTypes = append(p.sampleTypes, st)
			return err
		case 2: // sample
			var s profSample
			err := walkFields(data, func(f, wire int, v uint64, data []byte) error {
				switch f {
				case 1:
					return appendPacked(wire, v, data, func(x uint64) { s.locations = append(s.locations, x) })
				case 2:
					return appendPacked(wire, v, data, func(x uint64) { s.values = append(s.values, int64(x)) })
				}
				return nil
			})
			p.samples = append(p.samples, s)
			return err
		case 4: // location
			var id uint64
			var funcs []uint64
			err := walkFields(data, func(f, _ int, v uint64, data []byte) error {
				switch f {
				case 1:
					id = v
				case 4: // line
					return walkFields(data, func(f, _ int, v uint64, _ []byte) error {
						if f == 1 {
							funcs = append(funcs, v)
						}
						return nil
					})
				}
				return nil
			})
			p.locFuncs[id] = funcs
			return err
		case 5: // function
			var id uint64
			var name int64
			err := walkFields(data, func(f, _ int, v uint64, _ []byte) error {
				switch f {
				case 1:
					id = v
				case 2:
					name = int64(v)
				}
				return nil
			})
			p.funcNames[id] = name
			return err
		case 6: // string_table
			p.strings = append(p.strings, string(data))
		}
		return nil
	})
}

// walkFields calls fn for each field of a protobuf message: its number, its
// wire type, and its value (varint and fixed types) or its bytes
// (length-delimited).
func walkFields(b []byte, fn func(field, wire int, v uint64, data []byte) error) error {
	for len(b) > 0 {
		key, n := uvarint(b)
		if n <= 0 {
			return errors.New("bad field key")
		}
		b = b[n:]
		field, wire := int(key>>3), int(key&7)
		var v uint64
		var data []byte
		switch wire {
		case 0:
			v, n = uvarint(b)
			if n <= 0 {
				return errors.New("bad varint")
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return errors.New("short fixed64")
			}
			b = b[8:]
		case 2:
			l, n := uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return errors.New("bad length")
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return errors.New("short fixed32")
			}
			b = b[4:]
		default:
			return fmt.Errorf("unsupported wire type %d", wire)
		}
		if err := fn(field, wire, v, data); err != nil {
			return err
		}
	}
	return nil
}

// appendPacked reads a repeated varint field, packed or not.
func appendPacked(wire int, v uint64, data []byte, add func(uint64)) error {
	if wire == 0 {
		add(v)
		return nil
	}
	for len(data) > 0 {
		x, n := uvarint(data)
		if n <= 0 {
			return errors.New("bad packed varint")
		}
		add(x)
		data = data[n:]
	}
	return nil
}

func uvarint(b []byte) (uint64, int) {
	var x uint64
	for i := 0; i < len(b) && i < 10; i++ {
		x |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return x, i + 1
		}
	}
	return 0, 0
}
