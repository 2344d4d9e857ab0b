// go-redis v9's ClusterClient through a master's death: seeded at SEED, it writes for a
// second, kills the process VICTIM_PID (the master at VICTIM_ADDR) with SIGKILL, then writes
// to the victim's keys until one is acknowledged, at most 120 s, and prints the seconds from
// the kill, or `timeout`.
//
// go-redis (v9.23, default options) retries a command that meets a connection error on the
// slot's first node again and again: it re-reads the slot map only on MOVED, READONLY or every
// ClusterStateReloadInterval (60 s), whatever the server does. So it follows a failover within
// a minute: 59.0 s after a kill -9 against Redis Cluster 3+3 as against Meridian (measured
// 2026-12-06). Run by scripts/cluster_failover.py:
// go run . failover SEED VICTIM_ADDR VICTIM_PID
package main

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func failoverMain(args []string) int {
	if len(args) != 3 {
		fmt.Println("usage: go-bank failover SEED VICTIM_ADDR VICTIM_PID")
		return 2
	}
	seed, victim := args[0], args[1]
	pid, err := strconv.Atoi(args[2])
	if err != nil {
		fmt.Println("bad pid:", err)
		return 2
	}
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:       []string{seed},
		DialTimeout: time.Second,
		ReadTimeout: time.Second,
	})
	defer c.Close()
	var mine []string
	for i := 0; i < 2000 && len(mine) < 50; i++ {
		key := fmt.Sprintf("gofo:%d", i)
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			fmt.Println("MasterForKey:", err)
			return 1
		}
		if m.Options().Addr == victim {
			mine = append(mine, key)
		}
	}
	if len(mine) == 0 {
		fmt.Println("the victim leads no key")
		return 1
	}
	// Writes before the kill; a node that has just restarted refuses them until its detector
	// hears a majority of the members (a second or so): wait that out, at most 30 s.
	wrote, end := 0, time.Now().Add(30*time.Second)
	var lastErr error
	for wrote < 3*len(mine) && time.Now().Before(end) {
		for _, k := range mine {
			if lastErr = c.Set(ctx, k, "before", 0).Err(); lastErr != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			wrote++
		}
	}
	if wrote < 3*len(mine) {
		fmt.Println("SET before the kill:", lastErr)
		return 1
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		fmt.Println("kill:", err)
		return 1
	}
	killed := time.Now()
	for i := 0; time.Since(killed) < 120*time.Second; i++ {
		if c.Set(ctx, mine[i%len(mine)], "after", 0).Err() == nil {
			fmt.Printf("%.3f\n", time.Since(killed).Seconds())
			return 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("timeout")
	return 1
}
