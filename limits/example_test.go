package limits_test

import (
	"fmt"
	"time"

	"github.com/tributary-run/tributary/limits"
)

// Limits are declared in code and checked once, before anything is stored:
// a limit that bounds nothing is an error naming the limit and the value.
func ExampleNew() {
	perCustomer := limits.Limit{Name: "per-customer-sync", Kind: "sync_customer", KeyArg: "customer_id", Max: 2}
	mailAPI := limits.Limit{Name: "mail-api", Kind: "mail.send", Rate: 100, Period: time.Second}

	lim, err := limits.New(limits.Config{Limits: []limits.Limit{perCustomer, mailAPI}})
	fmt.Println(len(lim.Limits()), err)

	_, err = limits.New(limits.Config{Limits: []limits.Limit{{Name: "unbounded", Kind: "sync_customer"}}})
	fmt.Println(err)
	// Output:
	// 2 <nil>
	// limit "unbounded": Max 0 must be at least 1 (or give a Total or a Rate)
}
