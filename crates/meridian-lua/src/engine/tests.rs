use super::*;
use std::time::Duration;

/// A host over a map of strings: SET, GET, INCR, DEL, and RESP3 shapes on demand.
#[derive(Default)]
struct MapHost {
    data: HashMap<Vec<u8>, Vec<u8>>,
    calls: Vec<Vec<Vec<u8>>>,
}

impl Host for MapHost {
    fn call(&mut self, args: Args<'_>, reply: &mut Reply) {
        let argv: Vec<Vec<u8>> = args.iter_from(0).map(<[u8]>::to_vec).collect();
        self.calls.push(argv.clone());
        let name = String::from_utf8_lossy(&argv[0]).to_ascii_lowercase();
        match (name.as_str(), argv.len()) {
            ("set", 3) => {
                self.data.insert(argv[1].clone(), argv[2].clone());
                reply.ok();
            }
            ("get", 2) => reply.opt_bulk(self.data.get(&argv[1]).map(Vec::as_slice)),
            ("incr", 2) => {
                let v = self
                    .data
                    .entry(argv[1].clone())
                    .or_insert_with(|| b"0".to_vec());
                let n: i64 = String::from_utf8_lossy(v).parse::<i64>().unwrap_or(0) + 1;
                *v = n.to_string().into_bytes();
                reply.int(n);
            }
            ("shapes", 1) => {
                reply.array(5);
                reply.map(1);
                reply.bulk(b"k");
                reply.double(1.5);
                reply.set(1);
                reply.bulk(b"m");
                reply.null();
                reply.out.extend_from_slice(b"#t\r\n");
                reply.verbatim(b"txt", b"hi");
            }
            ("echo", 2) => reply.bulk(&argv[1]),
            _ => reply.error("ERR unknown command"),
        }
    }
}

fn engine() -> Engine {
    Engine::new(Config::default()).unwrap()
}

fn eval(e: &mut Engine, host: &mut MapHost, body: &str, keys: &[&[u8]], argv: &[&[u8]]) -> String {
    let sha = match e.load(body.as_bytes()) {
        Ok(sha) => sha,
        Err(err) => return format!("-{err}\r\n"),
    };
    let (kb, kr) = parts(keys);
    let (ab, ar) = parts(argv);
    let mut reply = Reply::new(64);
    e.run(
        sha.as_bytes(),
        Args::from_parts(&kb, &kr),
        Args::from_parts(&ab, &ar),
        host,
        &mut reply,
    );
    String::from_utf8_lossy(&reply.out).into_owned()
}

fn parts(items: &[&[u8]]) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut bytes = Vec::new();
    let mut ranges = Vec::new();
    for i in items {
        ranges.push((bytes.len(), bytes.len() + i.len()));
        bytes.extend_from_slice(i);
    }
    (bytes, ranges)
}

fn run(body: &str) -> String {
    eval(&mut engine(), &mut MapHost::default(), body, &[], &[])
}

#[test]
fn return_values_convert_as_redis() {
    assert_eq!(run("return 1"), ":1\r\n");
    assert_eq!(run("return 3.99"), ":3\r\n");
    assert_eq!(run("return -3.99"), ":-3\r\n");
    assert_eq!(run("return 'x'"), "$1\r\nx\r\n");
    assert_eq!(run("return true"), ":1\r\n");
    assert_eq!(run("return false"), "$-1\r\n");
    assert_eq!(run("return nil"), "$-1\r\n");
    assert_eq!(
        run("return {1, 'a', {2}, nil, 5}"),
        "*3\r\n:1\r\n$1\r\na\r\n*1\r\n:2\r\n"
    );
    assert_eq!(run("return redis.status_reply('FINE')"), "+FINE\r\n");
    assert_eq!(run("return {ok='A\\r\\nB'}"), "+A  B\r\n");
    assert_eq!(run("return redis.error_reply('MY err')"), "-MY err\r\n");
    assert_eq!(run("return redis.error_reply('-MY err')"), "-MY err\r\n");
    // Redis's rules for the code: the first word, ERR without a space; CR/LF trimmed.
    assert_eq!(run("return redis.error_reply('')"), "-ERR \r\n");
    assert_eq!(run("return redis.error_reply('-')"), "-ERR \r\n");
    assert_eq!(run("return redis.error_reply('oops')"), "-ERR oops\r\n");
    assert_eq!(
        run("return redis.error_reply('MY err\\r\\n')"),
        "-MY err\r\n"
    );
    assert_eq!(run("return redis.error_reply(' x')"), "- x\r\n");
    assert_eq!(run("return {err='boom'}"), "-boom\r\n");
    assert_eq!(run("return {double=1.5}"), "$3\r\n1.5\r\n");
}

#[test]
fn keys_and_argv_reach_the_script_and_calls_reach_the_host() {
    let mut e = engine();
    let mut h = MapHost::default();
    let body = "redis.call('set', KEYS[1], ARGV[1]) return redis.call('get', KEYS[1])";
    assert_eq!(eval(&mut e, &mut h, body, &[b"k"], &[b"v"]), "$1\r\nv\r\n");
    assert_eq!(h.data.get(&b"k"[..]).map(Vec::as_slice), Some(&b"v"[..]));
    // Numbers become %.17g arguments, integers their digits.
    eval(
        &mut e,
        &mut h,
        "redis.call('set', 'n', 3.14) redis.call('set', 'i', 10)",
        &[],
        &[],
    );
    assert_eq!(h.data[&b"n"[..]], b"3.1400000000000001");
    assert_eq!(h.data[&b"i"[..]], b"10");
    assert_eq!(
        eval(&mut e, &mut h, "return redis.call('incr', 'c')", &[], &[]),
        ":1\r\n"
    );
    // A status comes back as {ok=...}, a missing key as false.
    assert_eq!(
        eval(
            &mut e,
            &mut h,
            "return redis.call('set','a','b').ok",
            &[],
            &[]
        ),
        "$2\r\nOK\r\n"
    );
    assert_eq!(
        eval(
            &mut e,
            &mut h,
            "return redis.call('get','nope') == false",
            &[],
            &[]
        ),
        ":1\r\n"
    );
}

#[test]
fn command_errors_raise_from_call_and_return_from_pcall() {
    let mut e = engine();
    let mut h = MapHost::default();
    let sha = sha1_hex(b"return redis.call('nosuch')");
    assert_eq!(
        eval(&mut e, &mut h, "return redis.call('nosuch')", &[], &[]),
        format!("-ERR unknown command script: {sha}, on @user_script:1.\r\n")
    );
    assert_eq!(
        eval(
            &mut e,
            &mut h,
            "local r = redis.pcall('nosuch') return r.err",
            &[],
            &[]
        ),
        "$19\r\nERR unknown command\r\n"
    );
    assert_eq!(
        eval(&mut e, &mut h, "return redis.pcall()", &[], &[]),
        "-ERR Please specify at least one argument for this redis lib call\r\n"
    );
    assert!(
        eval(&mut e, &mut h, "return redis.call('get', {})", &[], &[]).starts_with(
            "-ERR Lua redis lib command arguments must be strings or integers script:"
        )
    );
    // Lua's pcall returns an error table's message.
    assert_eq!(
        eval(
            &mut e,
            &mut h,
            "local ok, m = pcall(redis.call, 'x') return m",
            &[],
            &[]
        ),
        "$19\r\nERR unknown command\r\n"
    );
}

#[test]
fn runtime_errors_name_the_script_and_line() {
    let body = "local x = 1\nreturn a";
    let sha = sha1_hex(body.as_bytes());
    assert_eq!(
        run(body),
        format!(
            "-ERR user_script:2: Script attempted to access nonexistent global variable 'a' \
             script: {sha}, on @user_script:2.\r\n"
        )
    );
    assert!(run("error('plain')").starts_with("-ERR user_script:1: plain script: "));
    assert!(run("error({err='CODE custom'})").starts_with("-CODE custom script: "));
    assert_eq!(
        run("return +"),
        "-ERR Error compiling script (new function): user_script:1: unexpected symbol near '+'\r\n"
    );
}

#[test]
fn the_sandbox_holds() {
    for (body, want) in [
        ("a = 10", "Attempt to modify a readonly table"),
        ("setmetatable(_G, {})", "Attempt to modify a readonly table"),
        (
            "local g = getmetatable(_G) g.__index = {}",
            "Attempt to modify a readonly table",
        ),
        (
            "redis = function() return 1 end",
            "Attempt to modify a readonly table",
        ),
        ("_G = {}", "Attempt to modify a readonly table"),
        (
            "redis.call = function() end",
            "Attempt to modify a readonly table",
        ),
        (
            "cjson.encode = function() end",
            "Attempt to modify a readonly table",
        ),
        ("bit.band = nil", "Attempt to modify a readonly table"),
        ("string.rep = nil", "Attempt to modify a readonly table"),
        ("rawset(_G, 'x', 1)", "Attempt to modify a readonly table"),
        ("getfenv(0).x = 1", "Attempt to modify a readonly table"),
        (
            "getfenv(cjson.encode).x = 1",
            "Attempt to modify a readonly table",
        ),
        (
            "getmetatable('').__index = {}",
            "Attempt to modify a readonly table",
        ),
        ("setfenv(0, {})", "Attempt to modify a readonly table"),
        (
            "setfenv(redis.status_reply, {})",
            "Attempt to modify a readonly table",
        ),
        ("setfenv(redis.call, {})", "cannot change environment"),
        ("loadfile('x')", "nonexistent global variable 'loadfile'"),
        ("dofile('x')", "nonexistent global variable 'dofile'"),
        ("print('x')", "nonexistent global variable 'print'"),
        ("return os.time()", "nonexistent global variable 'os'"),
        (
            "return io.open('/etc/passwd')",
            "nonexistent global variable 'io'",
        ),
        (
            "return debug.getinfo(1)",
            "nonexistent global variable 'debug'",
        ),
        (
            "return require('os')",
            "nonexistent global variable 'require'",
        ),
        (
            "return package.loaded",
            "nonexistent global variable 'package'",
        ),
        (
            "return loadstring(string.dump(function() return 1 end))()",
            "attempt to call a nil value",
        ),
        (
            "local parts = {string.dump(function() return 1 end)} local i = 0 \
             return load(function() i = i + 1 return parts[i] end)()",
            "attempt to call a nil value",
        ),
    ] {
        let got = run(body);
        assert!(got.starts_with("-") && got.contains(want), "{body}: {got}");
    }
    // What is allowed still works, and a loaded chunk runs in the sealed environment.
    assert_eq!(run("return loadstring('return 1 + 1')()"), ":2\r\n");
    assert_eq!(run("return ('abc'):upper()"), "$3\r\nABC\r\n");
    assert!(run("return loadstring('x = 1')()").contains("readonly table"));
    assert_eq!(run("local t = {} setmetatable(t, {}) return 1"), ":1\r\n");
}

#[test]
fn globals_do_not_leak_between_runs() {
    let mut e = engine();
    let mut h = MapHost::default();
    eval(&mut e, &mut h, "return 1", &[b"k1"], &[b"a1"]);
    assert_eq!(
        eval(&mut e, &mut h, "return #KEYS + #ARGV", &[], &[]),
        ":0\r\n"
    );
}

#[test]
fn helpers_behave_as_redis() {
    assert_eq!(
        run("return redis.sha1hex('Pizza & Mandolino')"),
        "$40\r\n74822d82031af7493c20eefa13bd07ec4fada82f\r\n"
    );
    assert_eq!(
        run("return redis.sha1hex('')"),
        "$40\r\nda39a3ee5e6b4b0d3255bfef95601890afd80709\r\n"
    );
    assert!(run("return redis.sha1hex()").starts_with("-ERR wrong number of arguments script:"));
    assert_eq!(
        run("redis.log(redis.LOG_WARNING, 'hello', 1) return 1"),
        ":1\r\n"
    );
    assert!(run("redis.log(9, 'x')").starts_with("-ERR Invalid debug level. script:"));
    assert!(run("redis.setresp(4)").starts_with("-ERR RESP version must be 2 or 3."));
    assert_eq!(run("return redis.REDIS_VERSION"), "$5\r\n7.2.0\r\n");
    assert_eq!(
        run("return redis.REDIS_VERSION_NUM"),
        format!(":{}\r\n", 0x070200)
    );
    assert_eq!(run("return redis.replicate_commands()"), ":1\r\n");
    // math.random is seeded and reproducible, and different call to call.
    let mut e = engine();
    let mut h = MapHost::default();
    let a = eval(&mut e, &mut h, "return tostring(math.random())", &[], &[]);
    let b = eval(&mut e, &mut h, "return tostring(math.random())", &[], &[]);
    assert_ne!(a, b);
    assert_eq!(a, run("return tostring(math.random())"));
    assert_eq!(run("return math.random(1, 1)"), ":1\r\n");
}

#[test]
fn resp3_replies_convert_both_ways() {
    let mut e = engine();
    let mut h = MapHost::default();
    let body = "redis.setresp(3) local r = redis.call('shapes') \
                return {r[1].map.k.double, next(r[2].set), tostring(r[3]), tostring(r[4]), \
                r[5].verbatim_string.string}";
    assert_eq!(
        eval(&mut e, &mut h, body, &[], &[]),
        "*5\r\n:1\r\n$1\r\nm\r\n$3\r\nnil\r\n$4\r\ntrue\r\n$2\r\nhi\r\n"
    );
    // A RESP3 script's booleans stay booleans; a RESP2 caller sees 1 and 0.
    assert_eq!(
        eval(&mut e, &mut h, "redis.setresp(3) return false", &[], &[]),
        ":0\r\n"
    );
    let sha = e.load(b"redis.setresp(3) return {map={a=true}}").unwrap();
    let mut reply = Reply::new(64);
    reply.resp3 = true;
    e.run(
        sha.as_bytes(),
        Args::from_parts(b"", &[]),
        Args::from_parts(b"", &[]),
        &mut h,
        &mut reply,
    );
    assert_eq!(&reply.out[..], b"%1\r\n$1\r\na\r\n#t\r\n");
}

#[test]
fn a_killed_script_stops_even_under_pcall() {
    for body in [
        "while true do end",
        "while true do pcall(function() while true do end end) end",
        "local co = coroutine.wrap(function() while true do end end) co()",
    ] {
        let mut e = engine();
        let control = e.control();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            control.kill();
        });
        let got = eval(&mut e, &mut MapHost::default(), body, &[], &[]);
        killer.join().unwrap();
        assert!(
            got.starts_with("-ERR Script killed by user with SCRIPT KILL..."),
            "{body}: {got}"
        );
        // The next script runs normally.
        assert_eq!(
            eval(&mut e, &mut MapHost::default(), "return 7", &[], &[]),
            ":7\r\n"
        );
    }
}

#[test]
fn memory_is_capped_and_the_engine_survives() {
    let mut e = Engine::new(Config {
        memory_limit: 16 << 20,
        ..Config::default()
    })
    .unwrap();
    let mut h = MapHost::default();
    let got = eval(
        &mut e,
        &mut h,
        "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end",
        &[],
        &[],
    );
    assert!(got.contains("not enough memory"), "{got}");
    assert_eq!(eval(&mut e, &mut h, "return 1", &[], &[]), ":1\r\n");
}

#[test]
fn scripts_are_cached_by_sha_and_flushed() {
    let mut e = engine();
    let sha = e.load(b"return 1").unwrap();
    assert_eq!(sha, sha1_hex(b"return 1"));
    assert!(e.exists(sha.as_bytes()));
    assert!(e.exists(sha.to_ascii_uppercase().as_bytes()));
    assert!(!e.exists(b"abc"));
    assert_eq!(e.cached().0, 1);
    e.flush().unwrap();
    assert!(!e.exists(sha.as_bytes()));
    let mut reply = Reply::new(16);
    e.run(
        sha.as_bytes(),
        Args::from_parts(b"", &[]),
        Args::from_parts(b"", &[]),
        &mut MapHost::default(),
        &mut reply,
    );
    assert_eq!(
        &reply.out[..],
        b"-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    // A flushed engine can still be killed through the control taken before.
    let shebang = e.load(b"#!lua flags=no-writes\nreturn 1").unwrap();
    assert!(e.script(shebang.as_bytes()).unwrap().flags.no_writes);
}

#[test]
fn returning_a_cycle_is_refused_not_recursed() {
    let got = run("local t = {} t[1] = t return t");
    assert!(
        got.contains("reached lua stack limit"),
        "{}",
        &got[got.len().saturating_sub(80)..]
    );
}

#[test]
fn large_returns_are_written_whole() {
    let got = run("local t = {} for i = 1, 100000 do t[i] = i end return t");
    assert!(got.starts_with("*100000\r\n:1\r\n:2\r\n"));
    assert!(got.ends_with(":100000\r\n"));
    let got = run("local m = {} for i = 1, 20000 do m['k' .. i] = i end return {map = m}");
    assert!(got.starts_with("*40000\r\n"), "{}", &got[..20]);
}

fn fcall(e: &mut Engine, name: &str, keys: &[&[u8]], argv: &[&[u8]]) -> String {
    let (kb, kr) = parts(keys);
    let (ab, ar) = parts(argv);
    let mut reply = Reply::new(64);
    e.run_function(
        name.as_bytes(),
        Args::from_parts(&kb, &kr),
        Args::from_parts(&ab, &ar),
        &mut MapHost::default(),
        &mut reply,
    );
    String::from_utf8_lossy(&reply.out).into_owned()
}

#[test]
fn libraries_load_register_and_run_functions() {
    let mut e = engine();
    let code = b"#!lua name=mylib\n\
        redis.register_function('echo', function(keys, args) return {keys[1], args[1]} end)\n\
        redis.register_function{function_name='ro', callback=function() return 1 end, flags={'no-writes'}}";
    assert_eq!(e.load_library(code, false).unwrap(), "mylib");
    assert_eq!(
        fcall(&mut e, "echo", &[b"k"], &[b"a"]),
        "*2\r\n$1\r\nk\r\n$1\r\na\r\n"
    );
    assert!(e.function(b"ro").unwrap().flags.no_writes);
    assert_eq!(
        e.load_library(code, false).unwrap_err(),
        "ERR Library 'mylib' already exists"
    );
    assert!(e.load_library(code, true).is_ok());
    // Another library may not take a function name.
    let other = b"#!lua name=other\nredis.register_function('echo', function() end)";
    assert_eq!(
        e.load_library(other, false).unwrap_err(),
        "ERR Function echo already exists"
    );
    for (code, want) in [
        (&b"return 1"[..], "ERR Missing library metadata"),
        (b"#!lua\nx", "ERR Library name was not given"),
        (b"#!lua name=a-b\nx", "ERR Library names can only contain"),
        (b"#!js name=a\nx", "ERR Engine 'js' not found"),
        (b"#!lua name=a\nlocal x = 1", "ERR No functions registered"),
        (b"#!lua name=a\n+", "ERR Error compiling function:"),
        (
            b"#!lua name=a\nerror('boom')",
            "ERR Error registering functions:",
        ),
        (b"#!lua name=a\nwhile true do end", "FUNCTION LOAD timeout"),
        (
            b"#!lua name=a\nredis.register_function('bad name', function() end)",
            "Library names can only",
        ),
        (
            b"#!lua name=a\nredis.call('set', 'x', 1)",
            "nonexistent global variable 'call'",
        ),
        (
            b"#!lua name=a\nreturn math.random()",
            "nonexistent global variable 'math'",
        ),
    ] {
        let err = e.load_library(code, false).unwrap_err();
        assert!(
            err.contains(want),
            "{}: {err}",
            String::from_utf8_lossy(code)
        );
    }
    assert_eq!(e.libraries().count(), 1);
    // Registration is closed outside FUNCTION LOAD.
    assert!(fcall(&mut e, "nope", &[], &[]).starts_with("-ERR Function not found"));
    // DUMP / RESTORE round trip, and a damaged payload is refused.
    let dump = e.dump_libraries();
    e.flush_libraries();
    assert!(e.function(b"echo").is_none());
    e.restore_libraries(&dump, RestorePolicy::Append).unwrap();
    assert!(e.function(b"echo").is_some());
    assert!(e.restore_libraries(&dump, RestorePolicy::Append).is_err());
    e.restore_libraries(&dump, RestorePolicy::Replace).unwrap();
    let mut bad = dump.clone();
    bad[25] ^= 1;
    assert!(e.restore_libraries(&bad, RestorePolicy::Flush).is_err());
    assert!(
        e.function(b"echo").is_some(),
        "a failed restore changes nothing"
    );
    assert!(e.delete_library(b"mylib"));
    assert!(!e.delete_library(b"mylib"));
}
