// Jedis's JedisCluster or Lettuce's RedisClusterClient through a master's death: seeded at
// SEED, it writes to the keys VICTIM_ADDR leads, kills the process VICTIM_PID (that master)
// with SIGKILL, then writes to the victim's keys until one is acknowledged, at most 60 s, and
// prints the seconds from the kill as its last line, or `timeout`. Run by
// scripts/cluster_failover.py:
// java -cp 'DEPS/*' Failover.java jedis|lettuce SEED VICTIM_ADDR VICTIM_PID
//
// Jedis (default retry logic, 1 s timeouts) renews its slot cache from a random known node
// after two consecutive connection failures of one command, so it follows the new map as soon
// as the survivors publish it. Lettuce follows a failover through its adaptive topology
// refresh triggers (here: persistent reconnect attempts to the dead node), the usual
// production setting: on by default since Lettuce 7 (6.x needed
// ClusterTopologyRefreshOptions' enableAllAdaptiveRefreshTriggers()). The probe keeps them all
// on and lowers their rate limit from the default one refresh in 30 s to one a second, and
// rejects commands to a disconnected node (REJECT_COMMANDS) instead of queueing them for its
// reconnection, so a write routed to the dead node fails at once and the next one is retried.

import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SocketOptions;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.cluster.ClusterClientOptions;
import io.lettuce.core.cluster.ClusterTopologyRefreshOptions;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.api.sync.RedisAdvancedClusterCommands;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.function.Function;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.providers.ClusterConnectionProvider;
import redis.clients.jedis.util.JedisClusterCRC16;

public class Failover {
  /** One client: the master of a slot ("host:port", or null), a SET, a map refresh, close. */
  interface Client extends AutoCloseable {
    String masterOf(int slot);

    void set(String key, String value);

    void refresh();

    @Override
    void close();
  }

  static Client jedis(HostAndPort seed) {
    var config = DefaultJedisClientConfig.builder()
        .connectionTimeoutMillis(1000).socketTimeoutMillis(1000).build();
    ClusterConnectionProvider provider = new ClusterConnectionProvider(Set.of(seed), config);
    JedisCluster c = new JedisCluster(provider, 5, Duration.ofSeconds(2));
    return new Client() {
      public String masterOf(int slot) {
        HostAndPort m = provider.getNode(slot);
        return m == null ? null : m.toString();
      }

      public void set(String key, String value) {
        String r = c.set(key, value);
        if (!"OK".equals(r)) throw new IllegalStateException("SET answered " + r);
      }

      public void refresh() {
        provider.renewSlotCache();
      }

      public void close() {
        c.close();
      }
    };
  }

  static Client lettuce(HostAndPort seed) {
    RedisClusterClient client = RedisClusterClient.create(
        RedisURI.Builder.redis(seed.getHost(), seed.getPort()).withTimeout(Duration.ofSeconds(1)).build());
    client.setOptions(ClusterClientOptions.builder()
        // Adaptive topology refresh: every trigger (Lettuce 7's default), at most one
        // refresh a second instead of one in 30 s.
        .topologyRefreshOptions(ClusterTopologyRefreshOptions.builder()
            .adaptiveRefreshTriggersTimeout(Duration.ofSeconds(1))
            .build())
        .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
        .socketOptions(SocketOptions.builder().connectTimeout(Duration.ofSeconds(1)).build())
        .timeoutOptions(TimeoutOptions.enabled(Duration.ofSeconds(1)))
        .build());
    StatefulRedisClusterConnection<String, String> conn = client.connect();
    RedisAdvancedClusterCommands<String, String> c = conn.sync();
    return new Client() {
      public String masterOf(int slot) {
        RedisClusterNode m = conn.getPartitions().getMasterBySlot(slot);
        return m == null ? null : m.getUri().getHost() + ":" + m.getUri().getPort();
      }

      public void set(String key, String value) {
        String r = c.set(key, value);
        if (!"OK".equals(r)) throw new IllegalStateException("SET answered " + r);
      }

      public void refresh() {
        client.refreshPartitions();
      }

      public void close() {
        conn.close();
        client.shutdown(Duration.ZERO, Duration.ofSeconds(2));
      }
    };
  }

  static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  static int run(String which, HostAndPort seed, String victim, long pid) {
    Function<HostAndPort, Client> make = which.equals("lettuce") ? Failover::lettuce : Failover::jedis;
    String prefix = which.equals("lettuce") ? "ltfo:" : "jdfo:";
    // The client's first map (the victim may have just restarted: retry, at most 30 s).
    Client c = null;
    Exception last = null;
    for (long end = System.nanoTime() + 30_000_000_000L; c == null && System.nanoTime() < end; ) {
      try {
        c = make.apply(seed);
      } catch (Exception e) {
        last = e;
        sleep(200);
      }
    }
    if (c == null) {
      System.out.println("no cluster client within 30 s: " + last);
      return 1;
    }
    try (Client client = c) {
      List<String> mine = new ArrayList<>();
      for (long end = System.nanoTime() + 30_000_000_000L; mine.isEmpty() && System.nanoTime() < end; ) {
        for (int i = 0; i < 2000 && mine.size() < 50; i++) {
          String key = prefix + i;
          if (victim.equals(client.masterOf(JedisClusterCRC16.getSlot(key)))) mine.add(key);
        }
        if (mine.isEmpty()) {
          client.refresh();
          sleep(200);
        }
      }
      if (mine.isEmpty()) {
        System.out.println("the victim leads no key");
        return 1;
      }
      // Writes before the kill; a node that has just restarted refuses them until its
      // detector hears a majority of the members (a second or so): wait that out, at most 30 s.
      int wrote = 0;
      for (long end = System.nanoTime() + 30_000_000_000L; wrote < 3 * mine.size() && System.nanoTime() < end; ) {
        for (String k : mine) {
          try {
            client.set(k, "before");
            wrote++;
          } catch (RuntimeException e) {
            last = e;
            sleep(50);
          }
        }
      }
      if (wrote < 3 * mine.size()) {
        System.out.println("the victim's keys refused writes before the kill: " + last);
        return 1;
      }
      ProcessHandle victimProcess = ProcessHandle.of(pid).orElse(null);
      if (victimProcess == null || !victimProcess.destroyForcibly()) {
        System.out.println("kill -9 " + pid + ": no such process");
        return 1;
      }
      long killed = System.nanoTime();
      for (int i = 0; System.nanoTime() - killed < 60_000_000_000L; i++) {
        try {
          client.set(mine.get(i % mine.size()), "after");
          System.out.printf("%.3f%n", (System.nanoTime() - killed) / 1e9);
          return 0;
        } catch (RuntimeException e) {
          last = e;
          sleep(20);
        }
      }
      System.out.println("timeout (last error: " + last + ")");
      return 1;
    }
  }

  public static void main(String[] args) {
    int rc;
    if (args.length != 4 || !Set.of("jedis", "lettuce").contains(args[0])) {
      System.out.println("usage: Failover.java jedis|lettuce SEED VICTIM_ADDR VICTIM_PID");
      rc = 2;
    } else {
      try {
        rc = run(args[0], HostAndPort.from(args[1]), args[2], Long.parseLong(args[3]));
      } catch (Exception e) {
        System.out.println("failed: " + e);
        rc = 1;
      }
    }
    System.out.flush();
    System.exit(rc);
  }
}
