# Records Redis 7.0.15's raw replies to geo commands for meridian-redis's geo tests
# (`geo/tests.rs`, `replies_equal_redis_7_0_15`). Run against a scratch redis-server 7.0.15
# on 127.0.0.1:6399 (it is FLUSHALLed):
#     python3 record_redis_replies.py redis-7.0.15-replies.txt
import random, socket, sys

def enc(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out

class Conn:
    def __init__(self):
        self.s = socket.create_connection(("127.0.0.1", 6399))
        self.buf = b""
    def _line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.s.recv(65536)
        l, self.buf = self.buf.split(b"\r\n", 1)
        return l
    def _read(self):
        l = self._line()
        out = l + b"\r\n"
        t = l[:1]
        if t == b"$" and l != b"$-1":
            n = int(l[1:])
            while len(self.buf) < n + 2:
                self.buf += self.s.recv(65536)
            out += self.buf[:n + 2]
            self.buf = self.buf[n + 2:]
        elif t == b"*" and l != b"*-1":
            for _ in range(int(l[1:])):
                out += self._read()
        return out
    def cmd(self, args):
        self.s.sendall(enc(args))
        return self._read()

c = Conn()
c.cmd(["FLUSHALL"])
out = open(sys.argv[1], "w")
def run(*args):
    args = [str(a) for a in args]
    r = c.cmd(args).decode()
    assert "|" not in r and all(" " not in a and "|" not in a for a in args)
    out.write("> " + " ".join(args) + "\n< " + r.replace("\r\n", "|") + "\n")

rnd = random.Random(20240515)
def f(x): return repr(float(x))
units = ["m", "km", "mi", "ft", "KM"]
keys = []
for k in range(4):
    key = "pts%d" % k
    keys.append(key)
    argv = ["GEOADD", key]
    for j in range(90):
        if k == 3:  # near the poles' limits and the antimeridian
            lon = rnd.choice([rnd.uniform(-180, -170), rnd.uniform(170, 180)])
            lat = rnd.choice([rnd.uniform(-85.05112878, -75), rnd.uniform(75, 85.05112878)])
        elif k == 2:  # a city
            lon = 2.35 + rnd.uniform(-0.3, 0.3)
            lat = 48.85 + rnd.uniform(-0.2, 0.2)
        else:
            lon = rnd.uniform(-180, 180)
            lat = rnd.uniform(-85.05112878, 85.05112878)
        argv += [f(lon), f(lat), "m%d" % j]
    run(*argv)
    run("ZRANGE", key, "0", "-1", "WITHSCORES")
    run("GEOPOS", key, *["m%d" % j for j in range(0, 90, 7)], "nope")
    run("GEOHASH", key, *["m%d" % j for j in range(0, 90, 5)], "nope")

def center(key):
    if key == "pts2":
        return 2.35 + rnd.uniform(-0.3, 0.3), 48.85 + rnd.uniform(-0.2, 0.2)
    if key == "pts3":
        return rnd.uniform(-180, 180), rnd.choice([rnd.uniform(-85.05112878, -70), rnd.uniform(70, 85.05112878)])
    return rnd.uniform(-180, 180), rnd.uniform(-85.05112878, 85.05112878)

def size(key, unit):
    scale = {"m": 1, "km": 1000, "KM": 1000, "mi": 1609.34, "ft": 0.3048}[unit]
    meters = 10 ** rnd.uniform(2, 4.5) if key == "pts2" else 10 ** rnd.uniform(4, 7.3)
    return f(meters / scale)

def options(store_ok):
    o = []
    for w in ["WITHDIST", "WITHHASH", "WITHCOORD"]:
        if not store_ok and rnd.random() < 0.4:
            o.append(w)
    r = rnd.random()
    if r < 0.3:
        o += ["COUNT", str(rnd.randint(1, 12))]
        if rnd.random() < 0.3:
            o.append("ANY")
    if rnd.random() < 0.5:
        o.append(rnd.choice(["ASC", "DESC", "asc"]))
    rnd.shuffle(o)
    return o

def fix_count(o):
    # COUNT n pairs may be split by shuffle: rebuild.
    n = None
    rest = []
    for x in o:
        if x.isdigit():
            n = x
        elif x != "COUNT":
            rest.append(x)
    if n is not None:
        rest += ["COUNT", n]
    return rest

for i in range(140):
    key = rnd.choice(keys)
    unit = rnd.choice(units)
    lon, lat = center(key)
    kind = rnd.randint(0, 5)
    opts = fix_count(options(False))
    if kind == 0:
        run("GEORADIUS", key, f(lon), f(lat), size(key, unit), unit, *opts)
    elif kind == 1:
        run("GEORADIUSBYMEMBER_RO", key, "m%d" % rnd.randint(0, 89), size(key, unit), unit, *opts)
    elif kind == 2:
        run("GEOSEARCH", key, "FROMLONLAT", f(lon), f(lat), "BYRADIUS", size(key, unit), unit, *opts)
    elif kind == 3:
        run("GEOSEARCH", key, "FROMLONLAT", f(lon), f(lat), "BYBOX", size(key, unit), size(key, unit), unit, *opts)
    elif kind == 4:
        run("GEOSEARCH", key, "FROMMEMBER", "m%d" % rnd.randint(0, 89), "BYBOX", size(key, unit), size(key, unit), unit, *opts)
    else:
        sopts = fix_count(options(True))
        dest = "dst%d" % i
        if rnd.random() < 0.5:
            run("GEORADIUS", key, f(lon), f(lat), size(key, unit), unit, *sopts, rnd.choice(["STORE", "STOREDIST"]), dest)
        else:
            extra = ["STOREDIST"] if rnd.random() < 0.5 else []
            run("GEOSEARCHSTORE", dest, key, "FROMLONLAT", f(lon), f(lat), "BYRADIUS", size(key, unit), unit, *sopts, *extra)
        run("ZRANGE", dest, "0", "-1", "WITHSCORES")
    if i % 3 == 0:
        run("GEODIST", key, "m%d" % rnd.randint(0, 89), "m%d" % rnd.randint(0, 89), unit)

# The documentation's Sicily examples and some fixed edge cases.
run("GEOADD", "Sicily", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania")
run("GEOADD", "Sicily", "12.758489", "38.788135", "edge1", "17.241510", "38.788135", "edge2")
run("GEOSEARCH", "Sicily", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km", "ASC", "WITHCOORD", "WITHDIST", "WITHHASH")
run("GEORADIUS", "Sicily", "15", "37", "inf", "km", "WITHCOORD", "DESC")
run("GEORADIUS", "Sicily", "15", "37", "0", "km")
run("GEORADIUSBYMEMBER", "Sicily", "Palermo", "0", "km", "WITHDIST")
run("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYBOX", "inf", "0", "km")
run("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYBOX", "inf", "inf", "km")
run("GEOSEARCH", "Sicily", "FROMLONLAT", "180", "85.05112878", "BYRADIUS", "1e300", "mi")
run("GEOSEARCH", "Sicily", "FROMLONLAT", "-180", "-85.05112878", "BYBOX", "1e300", "1e-300", "ft")
run("GEORADIUS", "Sicily", "15", "37", "1e-320", "m")
run("GEODIST", "Sicily", "edge1", "edge2", "ft")
run("GEOADD", "Sicily", "200", "1", "x")
run("GEOADD", "Sicily", "1e300", "1", "x")
run("GEOADD", "Sicily", "1", "-85.06", "x")
run("GEOSEARCH", "Sicily", "FROMLONLAT", "-1e-300", "0", "BYRADIUS", "1", "m")
run("GEOSEARCH", "Sicily", "FROMLONLAT", "0.0000005", "1", "BYRADIUS", "1", "m")
run("GEORADIUS", "Sicily", "15", "37", "10", "km", "COUNT", "9223372036854775807")
run("GEORADIUS", "Sicily", "15", "37", "10", "km", "COUNT", "9223372036854775808")
run("GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE", "Sicily")
run("ZRANGE", "Sicily", "0", "-1", "WITHSCORES")

# Errors and their order (each line one command).
run("GEOADD", "src", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania")
CASES = """\
GEOSEARCH src fromlonlat -73.9 40.7 frommember xxx bybox 6 6 km asc
GEOSEARCH src bybox 3 3 km asc desc withhash withdist withcoord
GEOSEARCH src fromlonlat 15 37 byradius 3 km bybox 3 3 km asc
geoSearch src fromlonlat 15 37 asc desc withhash withdist withcoord
GEOSEARCH src fromlonlat 15 37 bybox 6 6 km asc storedist
GEORADIUS src 15 37 10 km ANY ASC
GEORADIUS src 15 37 10 km COUNT
GEORADIUS src 15 37 10 km COUNT 0
GEORADIUS src 15 37 10 km COUNT -3 foo
GEORADIUS src 15 37 10 km COUNT x
GEORADIUS src 13.36 38.11 50 km store
GEORADIUS_RO src 13.36 38.11 50 km store dst
GEORADIUSBYMEMBER_RO src Palermo 50 km storedist dst
GEOSEARCHSTORE abc src fromlonlat 13.36 38.11 byradius 50 km store abc
GEORADIUS src 13.36 38.11 50 km store p2 withdist
GEORADIUS src 13.36 38.11 50 km withhash storedist p2
GEORADIUS src 13.36 38.11 50 km store p2 withcoords
GEOSEARCHSTORE p2 src fromlonlat 13.36 38.11 byradius 50 km withcoord
GEORADIUS src 181 0 1 km
GEORADIUS src 0 0 x km
GEORADIUS src 0 0 -1 km
GEORADIUS src 0 0 1 parsec
GEORADIUSBYMEMBER src Palermo nan km
GEORADIUSBYMEMBER src nope 1 km
GEOSEARCH src fromlonlat 0 0 bybox x 1 km
GEOSEARCH src fromlonlat 0 0 bybox 1 x km
GEOSEARCH src fromlonlat 0 0 bybox 1 -1 km
GEOSEARCH src fromlonlat 0 0 bybox 1 1 yd
GEOSEARCH src fromlonlat 0 0 bybox 1 1
GEOSEARCH src fromlonlat 0 x byradius 1 km
GEOSEARCH src fromlonlat 0 99 count 0 byradius 1 km
GEOSEARCH src count 0 fromlonlat 0 99 byradius 1 km
GEOSEARCH src frommember Palermo frommember Catania byradius 1 km byradius 200 km
GEODIST src a b parsec
GEODIST src a b km x
GEODIST nokey a b parsec
GEOADD src xx nx 1 1 m
GEOADD src ch nx xx
GEOADD src GT 1 1
GEOADD src GT 1 1 x
GEOADD src nan 0 x
GEOADD src -inf 0 x
GEORADIUSBYMEMBER nokey member -1 parsec
GEORADIUSBYMEMBER nokey member -1 parsec bogus
GEOSEARCH nokey frommember x byradius 1 km
GEOSEARCH nokey byradius 1 km
GEOHASH src
GEOPOS src
"""
for line in CASES.splitlines():
    run(*line.split())
