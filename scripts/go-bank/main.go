// A bank moved by go-redis v9 `Watch` transactions against a running `meridian up` cluster:
// clients on a node of each DC move money between accounts (plain clients, one per node:
// Meridian nodes serve every key), auditors read every account inside MULTI/EXEC. Every
// audit must see the same total, no balance may go negative, and the final total must be
// exact. Twice: on a transactional bucket with accounts on many slots, and on the default
// bucket with accounts under one hash tag (one slot, as Redis Cluster requires). Run by
// scripts/cluster-clients.sh: go run . HTTP_URL RESP_ADDR_DC0 RESP_ADDR_DC1
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

const accounts = 20
const start = 100

// keyFormat names account i: "gobank:acct%d" (transactional) or "{gobank}acct%d" (default).
var keyFormat = "gobank:acct%d"

func key(i int) string { return fmt.Sprintf(keyFormat, i) }

func transfer(ctx context.Context, c *redis.Client, from, to string, amount int) error {
	for {
		err := c.Watch(ctx, func(tx *redis.Tx) error {
			a, err := tx.Get(ctx, from).Int()
			if err != nil {
				return err
			}
			b, err := tx.Get(ctx, to).Int()
			if err != nil {
				return err
			}
			if a < amount {
				return nil
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, from, a-amount, 0)
				p.Set(ctx, to, b+amount, 0)
				return nil
			})
			return err
		}, from, to)
		if errors.Is(err, redis.TxFailedErr) {
			continue // a watched key changed: retry, as go-redis's docs do
		}
		return err
	}
}

func audit(ctx context.Context, c *redis.Client) (int, error) {
	cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < accounts; i++ {
			p.Get(ctx, key(i))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	total := 0
	for _, cmd := range cmds {
		v, err := cmd.(*redis.StringCmd).Int()
		if err != nil {
			return 0, err
		}
		if v < 0 {
			return 0, fmt.Errorf("negative balance %d", v)
		}
		total += v
	}
	return total, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "cluster" {
		os.Exit(clusterMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "failover" {
		os.Exit(failoverMain(os.Args[2:]))
	}
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: go-bank HTTP_URL RESP_ADDR_DC0 RESP_ADDR_DC1")
		os.Exit(2)
	}
	req, _ := http.NewRequest(http.MethodPut, os.Args[1]+"/buckets/gobank", bytes.NewBufferString(`{"type":"transactional"}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		fmt.Println("FAIL go-redis bank: bucket not created:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	clients := []*redis.Client{
		redis.NewClient(&redis.Options{Addr: os.Args[2]}),
		redis.NewClient(&redis.Options{Addr: os.Args[3]}),
	}
	code := 0
	for _, bank := range []struct{ format, label string }{
		{"gobank:acct%d", "transactional bucket, many slots"},
		{"{gobank}acct%d", "default bucket, one slot"},
	} {
		keyFormat = bank.format
		if !runBank(ctx, clients, bank.label) {
			code = 1
		}
	}
	os.Exit(code)
}

// runBank runs one bank over accounts named by keyFormat and reports it.
func runBank(ctx context.Context, clients []*redis.Client, label string) bool {
	if _, err := clients[0].TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < accounts; i++ {
			p.Set(ctx, key(i), start, 0)
		}
		return nil
	}); err != nil {
		fmt.Println("FAIL go-redis bank ("+label+"): setup:", err)
		return false
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(s string) { mu.Lock(); failures = append(failures, s); mu.Unlock() }
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := clients[w%2]
			rng := rand.New(rand.NewSource(int64(w) + 1))
			for i := 0; i < 30; i++ {
				a, b := rng.Intn(accounts), rng.Intn(accounts)
				if a == b {
					continue
				}
				if err := transfer(ctx, c, key(a), key(b), 1+rng.Intn(40)); err != nil {
					fail("transfer: " + err.Error())
					return
				}
			}
		}(w)
	}
	for _, c := range clients {
		wg.Add(1)
		go func(c *redis.Client) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				total, err := audit(ctx, c)
				if err != nil {
					fail("audit: " + err.Error())
					return
				}
				if total != accounts*start {
					fail("audit saw total " + strconv.Itoa(total))
				}
			}
		}(c)
	}
	wg.Wait()
	if total, err := audit(ctx, clients[1]); err != nil || total != accounts*start {
		fail(fmt.Sprintf("final total %d %v", total, err))
	}
	if len(failures) > 0 {
		fmt.Println("FAIL go-redis bank ("+label+"):", failures)
		return false
	}
	fmt.Println("ok   go-redis bank (" + label + "; Watch/TxPipelined from both DCs, audits in MULTI/EXEC)")
	return true
}
