// Jedis's JedisCluster and Lettuce's RedisClusterClient (Maven Central, the versions
// scripts/java-cluster/pom.xml pins), unchanged, against a running `meridian up`: per DC,
// seeded with one node of it, each client's map must name only that DC's nodes through
// repeated refreshes, and serve strings (SET/GET, INCR/INCRBY/DECR, APPEND, a SET NX lock,
// SET XX, GETSET/GETDEL, EXPIRE/TTL, SET PX expiry, ERR and WRONGTYPE replies), hashes,
// MULTI/EXEC over keys of one hash tag on the slot's master, WATCH aborting on a concurrent
// write and a WATCH retry loop from two threads that loses no increment, SCAN over every
// master and a pipeline of keys of different slots. Run by scripts/cluster-clients.sh:
// java -cp 'DEPS/*' scripts/java-cluster/Check.java HTTP_URL
// Prints one `ok`/`FAIL` line per check and `N passed, M failed` last; exits 1 on a failure.

import com.google.gson.JsonElement;
import com.google.gson.JsonParser;
import io.lettuce.core.KeyScanCursor;
import io.lettuce.core.LettuceFutures;
import io.lettuce.core.LettuceVersion;
import io.lettuce.core.RedisFuture;
import io.lettuce.core.RedisURI;
import io.lettuce.core.ScanArgs;
import io.lettuce.core.SetArgs;
import io.lettuce.core.TransactionResult;
import io.lettuce.core.api.sync.RedisCommands;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.SlotHash;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.api.async.RedisAdvancedClusterAsyncCommands;
import io.lettuce.core.cluster.api.sync.RedisAdvancedClusterCommands;
import io.lettuce.core.cluster.models.partitions.Partitions;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import redis.clients.jedis.ClusterPipeline;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisClientConfig;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.Response;
import redis.clients.jedis.Transaction;
import redis.clients.jedis.params.ScanParams;
import redis.clients.jedis.params.SetParams;
import redis.clients.jedis.providers.ClusterConnectionProvider;
import redis.clients.jedis.resps.ScanResult;
import redis.clients.jedis.util.JedisClusterCRC16;

// GETSET is deprecated in Redis 6.2 (and so in both clients), and checked all the same.
@SuppressWarnings("deprecation")
public class Check {
  interface Body {
    void run() throws Exception;
  }

  // Keys of this run only, so a rerun against the same cluster starts from nothing.
  static final String RUN = Long.toString(new Random().nextLong() & 0xffffffffL, 36);
  static int passed = 0;
  static int failed = 0;
  static final Duration TIMEOUT = Duration.ofSeconds(5);

  static void check(String name, Body body) {
    try {
      body.run();
      passed += 1;
      System.out.println("ok   " + name);
    } catch (Throwable e) {
      failed += 1;
      System.out.println("FAIL " + name + ": " + describe(e));
    }
    System.out.flush();
  }

  static String describe(Throwable e) {
    StringBuilder b = new StringBuilder(e.toString());
    for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
      b.append(" <- ").append(c);
    }
    if (!(e instanceof AssertionError)) {
      // Where the client threw, for an unexpected exception.
      for (StackTraceElement s : e.getStackTrace()) {
        if (s.getClassName().startsWith("Check")) {
          b.append(" at ").append(s);
          break;
        }
      }
    }
    return b.toString();
  }

  static void ok(boolean ok, String what) {
    if (!ok) throw new AssertionError(what);
  }

  static void eq(Object want, Object got, String what) {
    if (!Objects.equals(want, got)) {
      throw new AssertionError(what + ": want [" + want + "] got [" + got + "]");
    }
  }

  /** The message of the error reply a command must get (Jedis and Lettuce throw it). */
  static String errorOf(Body command) {
    try {
      command.run();
    } catch (redis.clients.jedis.exceptions.JedisDataException | io.lettuce.core.RedisCommandExecutionException e) {
      return e.getMessage();
    } catch (Exception e) {
      throw new AssertionError("not an error reply: " + e, e);
    }
    throw new AssertionError("no error reply");
  }

  /** Sleeps until `ms` milliseconds after the System.nanoTime() `since`. */
  static void sleep(long since, long ms) throws InterruptedException {
    long left = ms - (System.nanoTime() - since) / 1_000_000;
    if (left > 0) Thread.sleep(left);
  }

  /** {"host:port" of a member's RESP address: its DC} from GET /cluster. */
  static Map<String, String> members(String http) throws Exception {
    HttpClient h = HttpClient.newBuilder().connectTimeout(TIMEOUT).build();
    HttpRequest req = HttpRequest.newBuilder(URI.create(http + "/cluster")).timeout(TIMEOUT).build();
    String body = h.send(req, HttpResponse.BodyHandlers.ofString()).body();
    Map<String, String> dcOf = new TreeMap<>();
    for (JsonElement m : JsonParser.parseString(body).getAsJsonObject().getAsJsonArray("members")) {
      dcOf.put(m.getAsJsonObject().get("resp").getAsString(), m.getAsJsonObject().get("dc").getAsString());
    }
    return dcOf;
  }

  /** `prefix0` .. `prefix(n-1)`: keys of many slots (each check asserts it). */
  static List<String> numbered(String prefix, int n) {
    List<String> keys = new ArrayList<>();
    for (int i = 0; i < n; i++) keys.add(prefix + i);
    return keys;
  }

  /**
   * `n` keys `prefix0`, `prefix1`, ... that the client's slot map places on at least two masters
   * (a pipeline that spans masters is what the pipeline checks are about). The map is the
   * client's current one, and the placement planner moves slots while the checks run, so
   * a fixed list of keys may happen to land on one master; past the first `n - 1` keys the
   * last one is the first key whose master differs from theirs, when there is one.
   */
  static List<String> acrossMasters(String prefix, int n, java.util.function.IntFunction<String> masterOfSlot) {
    List<String> keys = numbered(prefix, n);
    Set<String> masters = new HashSet<>();
    for (String k : keys) masters.add(masterOfSlot.apply(JedisClusterCRC16.getSlot(k)));
    if (masters.size() > 1) return keys;
    for (int i = n; i < 100_000; i++) {
      String k = prefix + i;
      if (!masters.contains(masterOfSlot.apply(JedisClusterCRC16.getSlot(k)))) {
        keys.set(n - 1, k);
        break;
      }
    }
    return keys;
  }

  // ---------------------------------------------------------------- Jedis

  static void jedisInDc(Map<String, String> dcOf, String dc, String seed) {
    HostAndPort seedHp = HostAndPort.from(seed);
    JedisClientConfig config = DefaultJedisClientConfig.builder()
        .connectionTimeoutMillis(5000).socketTimeoutMillis(5000).build();
    // The JedisCluster built on a provider of our own, to renew its slot cache on demand (as
    // Jedis does itself on MOVED and on connection errors, from a random known node).
    ClusterConnectionProvider provider;
    try {
      provider = new ClusterConnectionProvider(Set.of(seedHp), config);
    } catch (Throwable e) {
      check("Jedis seeded in DC " + dc + ": connects", () -> {
        throw e;
      });
      return;
    }
    String pre = "Jedis JedisCluster seeded in DC " + dc + ": ";
    String p = "jd-" + RUN + "-dc" + dc;
    try (JedisCluster c = new JedisCluster(provider, 5, Duration.ofSeconds(10))) {
      check(pre + "8 slot-cache renewals name only DC " + dc + " nodes, every slot mapped", () -> {
        for (int r = 0; r < 8; r++) {
          provider.renewSlotCache();
          for (String n : c.getClusterNodes().keySet()) {
            eq(dc, dcOf.get(n), "renewal " + r + ": the DC of known node " + n);
          }
          for (int s = 0; s < 16384; s++) {
            HostAndPort m = provider.getNode(s);
            ok(m != null, "renewal " + r + ": slot " + s + " unmapped");
            eq(dc, dcOf.get(m.toString()), "renewal " + r + ": the DC of slot " + s + "'s master " + m);
          }
        }
      });

      check(pre + "SET/GET, INCR/INCRBY/DECR, APPEND, SET NX lock, SET XX, GETSET/GETDEL, EXPIRE/TTL, SET PX expiry, ERR/WRONGTYPE replies", () -> {
        eq("OK", c.set(p + ":gone", "v", SetParams.setParams().px(100)), "SET PX 100");
        long setAt = System.nanoTime();
        for (int i = 0; i < 50; i++) eq("OK", c.set(p + ":k" + i, "v" + i), "SET");
        for (int i = 0; i < 50; i++) eq("v" + i, c.get(p + ":k" + i), "GET");
        eq(null, c.get(p + ":missing"), "GET of a missing key");
        eq(5L, c.incrBy(p + ":n", 5), "INCRBY");
        eq(6L, c.incr(p + ":n"), "INCR");
        eq(5L, c.decr(p + ":n"), "DECR");
        eq("5", c.get(p + ":n"), "GET of the counter");
        eq(2L, c.append(p + ":s", "ab"), "APPEND");
        eq(3L, c.append(p + ":s", "c"), "APPEND again");
        eq("abc", c.get(p + ":s"), "GET after APPEND");
        eq("OK", c.set(p + ":lock", "me", SetParams.setParams().nx().ex(60)), "SET NX EX");
        eq(null, c.set(p + ":lock", "you", SetParams.setParams().nx().ex(60)), "SET NX on a held lock");
        eq("me", c.get(p + ":lock"), "the lock's holder");
        eq(null, c.set(p + ":xx", "a", SetParams.setParams().xx()), "SET XX of a missing key");
        eq(null, c.get(p + ":xx"), "GET after a refused SET XX");
        eq("OK", c.set(p + ":xx", "a"), "SET");
        eq("OK", c.set(p + ":xx", "b", SetParams.setParams().xx()), "SET XX of a key present");
        eq("b", c.getSet(p + ":xx", "c"), "GETSET");
        eq("c", c.getDel(p + ":xx"), "GETDEL");
        eq(null, c.getDel(p + ":xx"), "GETDEL of a deleted key");
        eq(null, c.get(p + ":xx"), "GET after GETDEL");
        eq(-1L, c.ttl(p + ":s"), "TTL without expiry");
        eq(1L, c.expire(p + ":s", 100), "EXPIRE");
        long ttl = c.ttl(p + ":s");
        ok(ttl > 90 && ttl <= 100, "TTL after EXPIRE 100: " + ttl);
        eq(-2L, c.ttl(p + ":missing"), "TTL of a missing key");
        eq(0L, c.expire(p + ":missing", 100), "EXPIRE of a missing key");
        String notInt = errorOf(() -> c.incr(p + ":s"));
        ok(notInt.startsWith("ERR value is not an integer"), "INCR of \"abc\" answered " + notInt);
        eq("OK", c.set(p + ":xx", "x"), "SET");
        String wrongType = errorOf(() -> c.hget(p + ":xx", "f"));
        ok(wrongType.startsWith("WRONGTYPE"), "HGET of a string answered " + wrongType);
        sleep(setAt, 250);
        eq(null, c.get(p + ":gone"), "GET 250 ms after SET PX 100");
        eq(-2L, c.ttl(p + ":gone"), "TTL 250 ms after SET PX 100");
      });

      check(pre + "HSET/HGET/HGETALL/HINCRBY", () -> {
        String h = p + ":h";
        eq(2L, c.hset(h, Map.of("a", "1", "b", "2")), "HSET of two new fields");
        eq("1", c.hget(h, "a"), "HGET");
        eq(null, c.hget(h, "zz"), "HGET of a missing field");
        eq(Map.of("a", "1", "b", "2"), c.hgetAll(h), "HGETALL");
        eq(12L, c.hincrBy(h, "a", 11), "HINCRBY");
        eq(0L, c.hset(h, "b", "x"), "HSET of a field present");
        eq(Map.of("a", "12", "b", "x"), c.hgetAll(h), "HGETALL after HINCRBY and HSET");
      });

      // MULTI/EXEC on a Jedis connection to the slot's master, as JedisCluster offers: its
      // multi() (UnifiedJedis's, in Jedis 5.x and 6.x) takes a connection to any node, not the
      // keys' slot's master, and Jedis 7 refuses it (UnsupportedOperationException).
      String t = "{" + p + "}";
      int slot = JedisClusterCRC16.getSlot(t + "a");
      check(pre + "MULTI/EXEC over two keys of one hash tag on the slot's master", () -> {
        eq("OK", c.set(t + "s", "ab"), "SET");
        try (Jedis j = new Jedis(c.getConnectionFromSlot(slot))) {
          Transaction tx = j.multi();
          tx.incrBy(t + "a", 2);
          tx.incrBy(t + "b", 3);
          tx.get(t + "s");
          eq(List.of(2L, 3L, "ab"), tx.exec(), "EXEC");
        }
        eq("2", c.get(t + "a"), "GET after EXEC");
        eq("3", c.get(t + "b"), "GET after EXEC");
      });

      check(pre + "WATCH aborts on a concurrent write; a WATCH retry loop from two threads loses no increment", () -> {
        String k = t + "ctr";
        eq("OK", c.set(k, "0"), "SET");
        try (Jedis a = new Jedis(c.getConnectionFromSlot(slot))) {
          eq("OK", a.watch(k), "WATCH");
          eq("0", a.get(k), "GET");
          eq("OK", c.set(k, "100"), "a write by another client");
          Transaction tx = a.multi();
          tx.set(k, "1");
          eq(null, tx.exec(), "EXEC after a watched key changed");
        }
        eq("100", c.get(k), "the other client's write stands");
        int perThread = 25;
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try {
          List<Future<Integer>> retries = new ArrayList<>();
          for (int th = 0; th < 2; th++) {
            retries.add(pool.submit(() -> {
              int lost = 0;
              try (Jedis j = new Jedis(c.getConnectionFromSlot(slot))) {
                for (int n = 0; n < perThread; n++) {
                  for (int attempt = 0; ; attempt++) {
                    ok(attempt < 200, "the WATCH loop never committed");
                    j.watch(k);
                    long v = Long.parseLong(j.get(k));
                    Transaction tx = j.multi();
                    tx.set(k, Long.toString(v + 1));
                    if (tx.exec() != null) break;
                    lost++;
                  }
                }
              }
              return lost;
            }));
          }
          for (Future<Integer> f : retries) f.get(60, TimeUnit.SECONDS);
        } finally {
          pool.shutdownNow();
        }
        eq(Long.toString(100 + 2 * perThread), c.get(k), "the counter after the WATCH loops");
      });

      check(pre + "SCAN on every master finds every key written", () -> {
        Set<HostAndPort> masters = new HashSet<>();
        for (int s = 0; s < 16384; s++) masters.add(provider.getNode(s));
        ok(masters.size() >= 2, "masters " + masters);
        Set<String> found = new HashSet<>();
        for (HostAndPort m : masters) {
          eq(dc, dcOf.get(m.toString()), "the DC of master " + m);
          try (Jedis j = new Jedis(provider.getConnection(m))) {
            String cursor = ScanParams.SCAN_POINTER_START;
            do {
              ScanResult<String> r = j.scan(cursor, new ScanParams().match(p + ":k*").count(100));
              found.addAll(r.getResult());
              cursor = r.getCursor();
            } while (!cursor.equals(ScanParams.SCAN_POINTER_START));
          }
        }
        Set<String> want = new HashSet<>();
        for (int i = 0; i < 50; i++) want.add(p + ":k" + i);
        eq(want, found, "the keys SCAN found");
      });

      check(pre + "ClusterPipeline of keys on different slots and masters", () -> {
        List<String> keys = acrossMasters(p + ":p", 20, s -> String.valueOf(provider.getNode(s)));
        Set<Integer> slots = new HashSet<>();
        Set<HostAndPort> nodes = new HashSet<>();
        for (String k : keys) {
          slots.add(JedisClusterCRC16.getSlot(k));
          nodes.add(provider.getNode(JedisClusterCRC16.getSlot(k)));
        }
        ok(slots.size() > 1 && nodes.size() > 1, "the keys span " + slots.size() + " slots on " + nodes);
        List<Response<String>> sets = new ArrayList<>();
        List<Response<String>> gets = new ArrayList<>();
        List<Response<Long>> incrs = new ArrayList<>();
        try (ClusterPipeline pl = c.pipelined()) {
          for (int i = 0; i < keys.size(); i++) sets.add(pl.set(keys.get(i), Integer.toString(i)));
          for (String k : keys) incrs.add(pl.incr(k));
          for (String k : keys) gets.add(pl.get(k));
          pl.sync();
        }
        for (int i = 0; i < keys.size(); i++) {
          eq("OK", sets.get(i).get(), "pipelined SET " + keys.get(i));
          eq((long) i + 1, incrs.get(i).get(), "pipelined INCR " + keys.get(i));
          eq(Integer.toString(i + 1), gets.get(i).get(), "pipelined GET " + keys.get(i));
        }
      });
    } catch (Throwable e) {
      check(pre + "the client closes", () -> {
        throw e;
      });
    }
  }

  // ---------------------------------------------------------------- Lettuce

  static String addr(RedisClusterNode n) {
    return n.getUri().getHost() + ":" + n.getUri().getPort();
  }

  static void lettuceInDc(Map<String, String> dcOf, String dc, String seed) {
    HostAndPort hp = HostAndPort.from(seed);
    RedisURI uri = RedisURI.Builder.redis(hp.getHost(), hp.getPort()).withTimeout(TIMEOUT).build();
    RedisClusterClient client = RedisClusterClient.create(uri);
    String pre = "Lettuce RedisClusterClient seeded in DC " + dc + ": ";
    String p = "lt-" + RUN + "-dc" + dc;
    StatefulRedisClusterConnection<String, String> conn;
    try {
      conn = client.connect();
    } catch (Throwable e) {
      check(pre + "connects", () -> {
        throw e;
      });
      client.shutdown(Duration.ZERO, Duration.ofSeconds(2));
      return;
    }
    RedisAdvancedClusterCommands<String, String> c = conn.sync();
    try {
      check(pre + "8 refreshPartitions() name only DC " + dc + " nodes, every slot mapped", () -> {
        for (int r = 0; r < 8; r++) {
          client.refreshPartitions();
          Partitions parts = client.getPartitions();
          ok(parts.size() >= 2, "refresh " + r + ": partitions " + parts);
          for (RedisClusterNode n : parts) {
            eq(dc, dcOf.get(addr(n)), "refresh " + r + ": the DC of node " + addr(n));
          }
          for (int s = 0; s < 16384; s++) {
            RedisClusterNode m = parts.getMasterBySlot(s);
            ok(m != null, "refresh " + r + ": slot " + s + " unmapped");
            eq(dc, dcOf.get(addr(m)), "refresh " + r + ": the DC of slot " + s + "'s master");
          }
          for (RedisClusterNode n : conn.getPartitions()) {
            eq(dc, dcOf.get(addr(n)), "refresh " + r + ": the connection's node " + addr(n));
          }
        }
      });

      check(pre + "SET/GET, INCR/INCRBY/DECR, APPEND, SET NX lock, SET XX, GETSET/GETDEL, EXPIRE/TTL, SET PX expiry, ERR/WRONGTYPE replies", () -> {
        eq("OK", c.set(p + ":gone", "v", SetArgs.Builder.px(100)), "SET PX 100");
        long setAt = System.nanoTime();
        for (int i = 0; i < 50; i++) eq("OK", c.set(p + ":k" + i, "v" + i), "SET");
        for (int i = 0; i < 50; i++) eq("v" + i, c.get(p + ":k" + i), "GET");
        eq(null, c.get(p + ":missing"), "GET of a missing key");
        eq(5L, c.incrby(p + ":n", 5), "INCRBY");
        eq(6L, c.incr(p + ":n"), "INCR");
        eq(5L, c.decr(p + ":n"), "DECR");
        eq("5", c.get(p + ":n"), "GET of the counter");
        eq(2L, c.append(p + ":s", "ab"), "APPEND");
        eq(3L, c.append(p + ":s", "c"), "APPEND again");
        eq("abc", c.get(p + ":s"), "GET after APPEND");
        eq("OK", c.set(p + ":lock", "me", SetArgs.Builder.nx().ex(60)), "SET NX EX");
        eq(null, c.set(p + ":lock", "you", SetArgs.Builder.nx().ex(60)), "SET NX on a held lock");
        eq("me", c.get(p + ":lock"), "the lock's holder");
        eq(null, c.set(p + ":xx", "a", SetArgs.Builder.xx()), "SET XX of a missing key");
        eq(null, c.get(p + ":xx"), "GET after a refused SET XX");
        eq("OK", c.set(p + ":xx", "a"), "SET");
        eq("OK", c.set(p + ":xx", "b", SetArgs.Builder.xx()), "SET XX of a key present");
        eq("b", c.getset(p + ":xx", "c"), "GETSET");
        eq("c", c.getdel(p + ":xx"), "GETDEL");
        eq(null, c.getdel(p + ":xx"), "GETDEL of a deleted key");
        eq(null, c.get(p + ":xx"), "GET after GETDEL");
        eq(-1L, c.ttl(p + ":s"), "TTL without expiry");
        eq(true, c.expire(p + ":s", 100), "EXPIRE");
        long ttl = c.ttl(p + ":s");
        ok(ttl > 90 && ttl <= 100, "TTL after EXPIRE 100: " + ttl);
        eq(-2L, c.ttl(p + ":missing"), "TTL of a missing key");
        eq(false, c.expire(p + ":missing", 100), "EXPIRE of a missing key");
        String notInt = errorOf(() -> c.incr(p + ":s"));
        ok(notInt.startsWith("ERR value is not an integer"), "INCR of \"abc\" answered " + notInt);
        eq("OK", c.set(p + ":xx", "x"), "SET");
        String wrongType = errorOf(() -> c.hget(p + ":xx", "f"));
        ok(wrongType.startsWith("WRONGTYPE"), "HGET of a string answered " + wrongType);
        sleep(setAt, 250);
        eq(null, c.get(p + ":gone"), "GET 250 ms after SET PX 100");
        eq(-2L, c.ttl(p + ":gone"), "TTL 250 ms after SET PX 100");
      });

      check(pre + "HSET/HGET/HGETALL/HINCRBY", () -> {
        String h = p + ":h";
        eq(2L, c.hset(h, Map.of("a", "1", "b", "2")), "HSET of two new fields");
        eq("1", c.hget(h, "a"), "HGET");
        eq(null, c.hget(h, "zz"), "HGET of a missing field");
        eq(Map.of("a", "1", "b", "2"), c.hgetall(h), "HGETALL");
        eq(12L, c.hincrby(h, "a", 11), "HINCRBY");
        eq(false, c.hset(h, "b", "x"), "HSET of a field present");
        eq(Map.of("a", "12", "b", "x"), c.hgetall(h), "HGETALL after HINCRBY and HSET");
      });

      // MULTI/EXEC on the cluster connection's connection to the slot's master (Lettuce routes
      // no transaction itself).
      String t = "{" + p + "}";
      int slot = SlotHash.getSlot(t + "a");
      check(pre + "MULTI/EXEC over two keys of one hash tag on the slot's master", () -> {
        eq("OK", c.set(t + "s", "ab"), "SET");
        RedisClusterNode m = conn.getPartitions().getMasterBySlot(slot);
        RedisCommands<String, String> n = conn.getConnection(m.getNodeId()).sync();
        eq("OK", n.multi(), "MULTI");
        n.incrby(t + "a", 2);
        n.incrby(t + "b", 3);
        n.get(t + "s");
        TransactionResult r = n.exec();
        ok(!r.wasDiscarded(), "EXEC discarded");
        eq(List.of(2L, 3L, "ab"), r.stream().toList(), "EXEC");
        eq("2", c.get(t + "a"), "GET after EXEC");
        eq("3", c.get(t + "b"), "GET after EXEC");
      });

      check(pre + "WATCH aborts on a concurrent write; a WATCH retry loop from two connections loses no increment", () -> {
        String k = t + "ctr";
        eq("OK", c.set(k, "0"), "SET");
        RedisClusterNode m = conn.getPartitions().getMasterBySlot(slot);
        // Each thread on a cluster connection of its own: a node connection is shared by the
        // commands its cluster connection routes, so MULTI needs one nobody else uses.
        List<StatefulRedisClusterConnection<String, String>> own = new ArrayList<>();
        try {
          for (int i = 0; i < 2; i++) own.add(client.connect());
          RedisCommands<String, String> a = own.get(0).getConnection(m.getNodeId()).sync();
          eq("OK", a.watch(k), "WATCH");
          eq("0", a.get(k), "GET");
          eq("OK", c.set(k, "100"), "a write by another client");
          a.multi();
          a.set(k, "1");
          ok(a.exec().wasDiscarded(), "EXEC after a watched key changed was not discarded");
          eq("100", c.get(k), "the other client's write stands");
          int perThread = 25;
          ExecutorService pool = Executors.newFixedThreadPool(2);
          try {
            List<Future<Integer>> retries = new ArrayList<>();
            for (StatefulRedisClusterConnection<String, String> o : own) {
              retries.add(pool.submit(() -> {
                RedisCommands<String, String> j = o.getConnection(m.getNodeId()).sync();
                int lost = 0;
                for (int n = 0; n < perThread; n++) {
                  for (int attempt = 0; ; attempt++) {
                    ok(attempt < 200, "the WATCH loop never committed");
                    j.watch(k);
                    long v = Long.parseLong(j.get(k));
                    j.multi();
                    j.set(k, Long.toString(v + 1));
                    if (!j.exec().wasDiscarded()) break;
                    lost++;
                  }
                }
                return lost;
              }));
            }
            for (Future<Integer> f : retries) f.get(60, TimeUnit.SECONDS);
          } finally {
            pool.shutdownNow();
          }
          eq(Long.toString(100 + 2 * perThread), c.get(k), "the counter after the WATCH loops");
        } finally {
          for (StatefulRedisClusterConnection<String, String> o : own) o.close();
        }
      });

      check(pre + "SCAN on every master, and the cluster connection's SCAN, find every key written", () -> {
        Set<String> want = new HashSet<>();
        for (int i = 0; i < 50; i++) want.add(p + ":k" + i);
        ScanArgs args = ScanArgs.Builder.matches(p + ":k*").limit(100);
        Set<String> found = new HashSet<>();
        int masters = 0;
        for (RedisClusterNode m : conn.getPartitions()) {
          if (!m.is(RedisClusterNode.NodeFlag.UPSTREAM)) continue;
          masters++;
          eq(dc, dcOf.get(addr(m)), "the DC of master " + addr(m));
          RedisCommands<String, String> n = conn.getConnection(m.getNodeId()).sync();
          KeyScanCursor<String> cur = n.scan(args);
          found.addAll(cur.getKeys());
          while (!cur.isFinished()) {
            cur = n.scan(cur, args);
            found.addAll(cur.getKeys());
          }
        }
        ok(masters >= 2, "masters: " + masters);
        eq(want, found, "the keys SCAN found on the masters");
        Set<String> all = new HashSet<>();
        KeyScanCursor<String> cur = c.scan(args);
        all.addAll(cur.getKeys());
        while (!cur.isFinished()) {
          cur = c.scan(cur, args);
          all.addAll(cur.getKeys());
        }
        eq(want, all, "the keys the cluster connection's SCAN found");
      });

      check(pre + "async pipeline (autoflush off) of keys on different slots and masters", () -> {
        List<String> keys =
            acrossMasters(p + ":p", 20, s -> addr(conn.getPartitions().getMasterBySlot(s)));
        Set<Integer> slots = new HashSet<>();
        Set<String> nodes = new HashSet<>();
        for (String k : keys) {
          slots.add(SlotHash.getSlot(k));
          nodes.add(addr(conn.getPartitions().getMasterBySlot(SlotHash.getSlot(k))));
        }
        ok(slots.size() > 1 && nodes.size() > 1, "the keys span " + slots.size() + " slots on " + nodes);
        RedisAdvancedClusterAsyncCommands<String, String> a = conn.async();
        List<RedisFuture<String>> sets = new ArrayList<>();
        List<RedisFuture<Long>> incrs = new ArrayList<>();
        List<RedisFuture<String>> gets = new ArrayList<>();
        conn.setAutoFlushCommands(false);
        try {
          for (int i = 0; i < keys.size(); i++) sets.add(a.set(keys.get(i), Integer.toString(i)));
          for (String k : keys) incrs.add(a.incr(k));
          for (String k : keys) gets.add(a.get(k));
          conn.flushCommands();
          List<RedisFuture<?>> all = new ArrayList<>(sets);
          all.addAll(incrs);
          all.addAll(gets);
          ok(LettuceFutures.awaitAll(TIMEOUT, all.toArray(new RedisFuture<?>[0])), "the pipeline timed out");
        } finally {
          conn.setAutoFlushCommands(true);
        }
        for (int i = 0; i < keys.size(); i++) {
          eq("OK", sets.get(i).get(), "pipelined SET " + keys.get(i));
          eq((long) i + 1, incrs.get(i).get(), "pipelined INCR " + keys.get(i));
          eq(Integer.toString(i + 1), gets.get(i).get(), "pipelined GET " + keys.get(i));
        }
      });
    } finally {
      conn.close();
      client.shutdown(Duration.ZERO, Duration.ofSeconds(2));
    }
  }

  static String jedisVersion() {
    try (var in = Jedis.class.getResourceAsStream("/redis/clients/jedis/pom.properties")) {
      java.util.Properties props = new java.util.Properties();
      props.load(in);
      return props.getProperty("version");
    } catch (Exception e) {
      return "?";
    }
  }

  public static void main(String[] args) {
    // Jedis logs through SLF4J (slf4j-nop: nothing); Netty and so Lettuce refuse SLF4J's no-op
    // provider and fall back to java.util.logging, whose console handler goes too.
    java.util.logging.LogManager.getLogManager().reset();
    String versions = "Jedis " + jedisVersion() + ", Lettuce " + LettuceVersion.getVersion().split("/")[0];
    try {
      Map<String, String> dcOf = members(args[0]);
      // One seed per DC: its highest RESP address, as scripts/js-cluster/check.mjs picks.
      Map<String, String> seeds = new TreeMap<>();
      for (Map.Entry<String, String> e : dcOf.entrySet()) seeds.put(e.getValue(), e.getKey());
      ok(seeds.size() >= 2, "DCs in GET /cluster: " + dcOf);
      for (Map.Entry<String, String> e : seeds.entrySet()) {
        jedisInDc(dcOf, e.getKey(), e.getValue());
        lettuceInDc(dcOf, e.getKey(), e.getValue());
      }
    } catch (Throwable e) {
      check("java-cluster runs", () -> {
        throw e;
      });
    }
    System.out.println("java-cluster (" + versions + "): " + passed + " passed, " + failed + " failed");
    System.exit(failed == 0 ? 0 : 1);
  }
}
