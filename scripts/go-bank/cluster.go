// go-redis v9's ClusterClient against a running `meridian up` cluster: seeded with one node of
// a DC, it refreshes its map (ReloadState, which asks a random known node) eight times and must
// still send every key to a master of that DC, write and read keys there, and run pipelines
// whose keys span slots. Run by scripts/cluster-clients.sh: go run . cluster HTTP_URL
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
)

type member struct {
	Resp string `json:"resp"`
	Dc   uint32 `json:"dc"`
}

func members(httpURL string) (map[string]uint32, error) {
	resp, err := http.Get(httpURL + "/cluster")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var doc struct {
		Members []member `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, err
	}
	out := map[string]uint32{}
	for _, m := range doc.Members {
		out[m.Resp] = m.Dc
	}
	return out, nil
}

// clusterDc checks one DC, seeded at `seed`; returns the first failure.
func clusterDc(ctx context.Context, dcOf map[string]uint32, seed string) error {
	dc := dcOf[seed]
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{seed}})
	defer c.Close()
	for refresh := 0; refresh < 8; refresh++ {
		c.ReloadState(ctx)
		time.Sleep(50 * time.Millisecond) // the reload is lazy: let it land
		for i := 0; i < 200; i++ {
			key := fmt.Sprintf("go-dc%d-%d", dc, i)
			m, err := c.MasterForKey(ctx, key)
			if err != nil {
				return fmt.Errorf("MasterForKey(%s): %w", key, err)
			}
			if d, ok := dcOf[m.Options().Addr]; !ok || d != dc {
				return fmt.Errorf("refresh %d: %s routed to %s (DC %d), seeded in DC %d",
					refresh, key, m.Options().Addr, d, dc)
			}
		}
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if d := dcOf[m.Options().Addr]; d != dc {
				return fmt.Errorf("master %s of DC %d in DC %d's map", m.Options().Addr, d, dc)
			}
			return m.Ping(ctx).Err()
		})
		if err != nil {
			return err
		}
	}
	for i := 0; i < 100; i++ {
		key := fmt.Sprintf("go-dc%d-%d", dc, i)
		if err := c.Set(ctx, key, i, 0).Err(); err != nil {
			return fmt.Errorf("SET %s: %w", key, err)
		}
		if v, err := c.Get(ctx, key).Int(); err != nil || v != i {
			return fmt.Errorf("GET %s: %d %v", key, v, err)
		}
	}
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < 100; i++ {
			p.Get(ctx, fmt.Sprintf("go-dc%d-%d", dc, i))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	for i, cmd := range cmds {
		if v, err := cmd.(*redis.StringCmd).Int(); err != nil || v != i {
			return fmt.Errorf("pipelined GET %d: %d %v", i, v, err)
		}
	}
	return nil
}

func clusterMain(args []string) int {
	if len(args) != 1 {
		fmt.Println("usage: go-bank cluster HTTP_URL")
		return 2
	}
	dcOf, err := members(args[0])
	if err != nil {
		fmt.Println("FAIL go-redis cluster: members:", err)
		return 1
	}
	seeds := map[uint32]string{}
	for addr, dc := range dcOf {
		if s, ok := seeds[dc]; !ok || addr > s {
			seeds[dc] = addr
		}
	}
	ctx := context.Background()
	for dc, seed := range seeds {
		if err := clusterDc(ctx, dcOf, seed); err != nil {
			fmt.Printf("FAIL go-redis ClusterClient seeded in DC %d: %v\n", dc, err)
			return 1
		}
	}
	fmt.Printf("ok   go-redis ClusterClient: %d DCs, 8 map refreshes each stay in the DC; SET/GET, pipelines\n", len(seeds))
	return 0
}
