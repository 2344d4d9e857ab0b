//! SigV4 verification and signing against AWS's published vectors, and every refusal.

use super::*;

const AK: &str = "AKIAIOSFODNN7EXAMPLE";
const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const T0: i64 = 1_369_353_600; // 20130524T000000Z
const HOST: &str = "examplebucket.s3.amazonaws.com";

fn creds() -> Credentials {
    Credentials::new(AK, SK)
}

fn hdrs<'a>(h: &'a [(&'a str, &'a str)]) -> Vec<Header<'a>> {
    h.iter().map(|(n, v)| (*n, v.as_bytes())).collect()
}

fn auth(sig: &str, signed: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request,SignedHeaders={signed},Signature={sig}"
    )
}

/// AWS docs, "Example: GET Object" (Range header).
const GET_SIG: &str = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";

fn get_object_headers(authz: &str) -> Vec<(&'static str, String)> {
    vec![
        ("host", HOST.to_owned()),
        ("range", "bytes=0-9".to_owned()),
        ("x-amz-content-sha256", EMPTY_SHA256.to_owned()),
        ("x-amz-date", "20130524T000000Z".to_owned()),
        ("authorization", authz.to_owned()),
    ]
}

fn run(
    method: &str,
    path: &str,
    query: Option<&str>,
    h: &[(&str, String)],
    now: i64,
) -> Result<Authenticated, S3Error> {
    let headers: Vec<Header<'_>> = h.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
    let parts = RequestParts {
        method,
        raw_path: path,
        raw_query: query,
        headers: &headers,
    };
    verify(&parts, &creds(), now)
}

#[test]
fn aws_example_get_object() {
    let h = get_object_headers(&auth(GET_SIG, "host;range;x-amz-content-sha256;x-amz-date"));
    let a = run("GET", "/test.txt", None, &h, T0).unwrap();
    assert_eq!(a.seed_signature, GET_SIG);
    assert_eq!(a.access_key, AK);
    assert_eq!(a.region, "us-east-1");
    assert_eq!(a.date, "20130524");
    assert_eq!(a.scope, "20130524/us-east-1/s3/aws4_request");
    assert_eq!(
        a.payload,
        PayloadMode::Sha256(hex::decode(EMPTY_SHA256).unwrap().try_into().unwrap())
    );
    assert!(!a.presigned);
    // The same request signed by our signer.
    let headers: Vec<Header<'_>> = h[..4].iter().map(|(n, v)| (*n, v.as_bytes())).collect();
    let parts = RequestParts {
        method: "GET",
        raw_path: "/test.txt",
        raw_query: None,
        headers: &headers,
    };
    let c = creds();
    let params = SigningParams {
        credentials: &c,
        region: "us-east-1",
        timestamp: "20130524T000000Z",
    };
    let authz = sign_request(
        &parts,
        &params,
        &["host", "range", "x-amz-content-sha256", "x-amz-date"],
        EMPTY_SHA256,
    )
    .unwrap();
    assert!(authz.ends_with(&format!("Signature={GET_SIG}")), "{authz}");
}

#[test]
fn aws_example_get_object_tolerates_spacing_and_untrimmed_values() {
    let mut h = get_object_headers(&format!(
        "AWS4-HMAC-SHA256  Credential={AK}/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature={GET_SIG}"
    ));
    h[1].1 = "  bytes=0-9 ".to_owned();
    h[0].0 = "Host";
    run("GET", "/test.txt", None, &h, T0).unwrap();
}

#[test]
fn aws_example_put_object() {
    let sig = "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd";
    let body_hash = hex::encode(Sha256::digest(b"Welcome to Amazon S3."));
    assert_eq!(
        body_hash,
        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
    );
    let h = vec![
        ("host", HOST.to_owned()),
        ("date", "Fri, 24 May 2013 00:00:00 GMT".to_owned()),
        (
            "authorization",
            auth(
                sig,
                "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
            ),
        ),
        ("x-amz-date", "20130524T000000Z".to_owned()),
        ("x-amz-storage-class", "REDUCED_REDUNDANCY".to_owned()),
        ("x-amz-content-sha256", body_hash.clone()),
    ];
    // Sent raw ('$') or encoded ('%24'): both canonicalize to /test%24file.text.
    for path in ["/test$file.text", "/test%24file.text"] {
        let a = run("PUT", path, None, &h, T0 + 300).unwrap();
        assert_eq!(a.seed_signature, sig);
        let mut want = [0u8; 32];
        hex::decode_to_slice(&body_hash, &mut want).unwrap();
        assert_eq!(a.payload, PayloadMode::Sha256(want));
    }
}

#[test]
fn aws_example_get_bucket_lifecycle() {
    let sig = "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543";
    let h = vec![
        ("host", HOST.to_owned()),
        ("x-amz-date", "20130524T000000Z".to_owned()),
        (
            "authorization",
            auth(sig, "host;x-amz-content-sha256;x-amz-date"),
        ),
        ("x-amz-content-sha256", EMPTY_SHA256.to_owned()),
    ];
    run("GET", "/", Some("lifecycle"), &h, T0).unwrap();
    run("GET", "/", Some("lifecycle="), &h, T0).unwrap();
    let e = run("GET", "/", Some("cors"), &h, T0).unwrap_err();
    assert_eq!(e.code, S3Code::SignatureDoesNotMatch);
}

#[test]
fn aws_example_list_objects() {
    let sig = "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7";
    let h = vec![
        ("host", HOST.to_owned()),
        ("x-amz-date", "20130524T000000Z".to_owned()),
        (
            "authorization",
            auth(sig, "host;x-amz-content-sha256;x-amz-date"),
        ),
        ("x-amz-content-sha256", EMPTY_SHA256.to_owned()),
    ];
    run("GET", "/", Some("max-keys=2&prefix=J"), &h, T0).unwrap();
    // Order of parameters in the URL does not matter.
    run("GET", "/", Some("prefix=J&max-keys=2"), &h, T0).unwrap();
    for q in [
        "max-keys=3&prefix=J",
        "max-keys=2&prefix=K",
        "max-keys=2&prefix=J&x=1",
    ] {
        assert_eq!(
            run("GET", "/", Some(q), &h, T0).unwrap_err().code,
            S3Code::SignatureDoesNotMatch,
            "{q}"
        );
    }
}

const PRESIGNED_QUERY: &str = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";

#[test]
fn aws_example_presigned_get() {
    let h = vec![("host", HOST.to_owned())];
    let a = run("GET", "/test.txt", Some(PRESIGNED_QUERY), &h, T0 + 3600).unwrap();
    assert!(a.presigned);
    assert_eq!(a.payload, PayloadMode::Unsigned);
    assert_eq!(
        a.seed_signature,
        "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
    );
    // Still valid at the last second, expired after.
    run("GET", "/test.txt", Some(PRESIGNED_QUERY), &h, T0 + 86_400).unwrap();
    let e = run("GET", "/test.txt", Some(PRESIGNED_QUERY), &h, T0 + 86_401).unwrap_err();
    assert_eq!(e.code, S3Code::AccessDenied);
    assert!(e.message.contains("expired"));
    let e = run("GET", "/test.txt", Some(PRESIGNED_QUERY), &h, T0 - 3600).unwrap_err();
    assert_eq!(e.code, S3Code::AccessDenied);
    // Our presigner produces the same URL.
    let headers = hdrs(&[("host", HOST)]);
    let parts = RequestParts {
        method: "GET",
        raw_path: "/test.txt",
        raw_query: None,
        headers: &headers,
    };
    let c = creds();
    let params = SigningParams {
        credentials: &c,
        region: "us-east-1",
        timestamp: "20130524T000000Z",
    };
    assert_eq!(
        presign(&parts, &params, 86_400, &["host"]).unwrap(),
        PRESIGNED_QUERY
    );
}

#[test]
fn presigned_tampering() {
    let h = vec![("host", HOST.to_owned())];
    let now = T0 + 10;
    let e = run("GET", "/test.txt2", Some(PRESIGNED_QUERY), &h, now).unwrap_err();
    assert_eq!(e.code, S3Code::SignatureDoesNotMatch);
    let e = run("PUT", "/test.txt", Some(PRESIGNED_QUERY), &h, now).unwrap_err();
    assert_eq!(e.code, S3Code::SignatureDoesNotMatch);
    let q = PRESIGNED_QUERY.replace("86400", "86401");
    assert_eq!(
        run("GET", "/test.txt", Some(&q), &h, now).unwrap_err().code,
        S3Code::SignatureDoesNotMatch
    );
    let q = format!("{PRESIGNED_QUERY}&versionId=1");
    assert_eq!(
        run("GET", "/test.txt", Some(&q), &h, now).unwrap_err().code,
        S3Code::SignatureDoesNotMatch
    );
    let q = PRESIGNED_QUERY.replace("86400", "604801");
    assert_eq!(
        run("GET", "/test.txt", Some(&q), &h, now).unwrap_err().code,
        S3Code::AuthorizationQueryParametersError
    );
    let q = PRESIGNED_QUERY.replace("AKIAIOSFODNN7EXAMPLE", "AKIAOTHER");
    assert_eq!(
        run("GET", "/test.txt", Some(&q), &h, now).unwrap_err().code,
        S3Code::InvalidAccessKeyId
    );
    let q = format!("{PRESIGNED_QUERY}&X-Amz-Date=20130524T000000Z");
    assert_eq!(
        run("GET", "/test.txt", Some(&q), &h, now).unwrap_err().code,
        S3Code::AuthorizationQueryParametersError
    );
    let q = PRESIGNED_QUERY.replace("&X-Amz-SignedHeaders=host", "");
    assert_eq!(
        run("GET", "/test.txt", Some(&q), &h, now).unwrap_err().code,
        S3Code::AuthorizationQueryParametersError
    );
    let other_host = vec![("host", "evil.example.com".to_owned())];
    assert_eq!(
        run("GET", "/test.txt", Some(PRESIGNED_QUERY), &other_host, now)
            .unwrap_err()
            .code,
        S3Code::SignatureDoesNotMatch
    );
    let both = vec![
        ("host", HOST.to_owned()),
        ("authorization", auth(GET_SIG, "host")),
    ];
    assert_eq!(
        run("GET", "/test.txt", Some(PRESIGNED_QUERY), &both, now)
            .unwrap_err()
            .code,
        S3Code::InvalidArgument
    );
}

#[test]
fn header_tampering() {
    let signed = "host;range;x-amz-content-sha256;x-amz-date";
    let good = get_object_headers(&auth(GET_SIG, signed));
    let check = |h: &[(&str, String)], path: &str, now: i64, code: S3Code| {
        let e = run("GET", path, None, h, now).unwrap_err();
        assert_eq!(e.code, code, "{e}");
    };
    check(&good, "/test.txt2", T0, S3Code::SignatureDoesNotMatch);
    check(&good, "/Test.txt", T0, S3Code::SignatureDoesNotMatch);
    let mut h = good.clone();
    h[1].1 = "bytes=0-10".into();
    check(&h, "/test.txt", T0, S3Code::SignatureDoesNotMatch);
    let mut h = good.clone();
    h[2].1 = UNSIGNED_PAYLOAD.into();
    check(&h, "/test.txt", T0, S3Code::SignatureDoesNotMatch);
    // A repeated signed header changes the canonical value.
    let mut h = good.clone();
    h.push(("range", "bytes=20-30".into()));
    check(&h, "/test.txt", T0, S3Code::SignatureDoesNotMatch);
    // Wrong secret.
    let headers: Vec<Header<'_>> = good.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
    let parts = RequestParts {
        method: "GET",
        raw_path: "/test.txt",
        raw_query: None,
        headers: &headers,
    };
    let wrong = Credentials::new(AK, "not-the-secret");
    assert_eq!(
        verify(&parts, &wrong, T0).unwrap_err().code,
        S3Code::SignatureDoesNotMatch
    );
    let mut map = HashMap::new();
    map.insert(AK.to_owned(), SK.to_owned());
    verify(&parts, &map, T0).unwrap();
    assert_eq!(
        verify(&parts, &HashMap::<String, String>::new(), T0)
            .unwrap_err()
            .code,
        S3Code::InvalidAccessKeyId
    );
    // Skew.
    check(&good, "/test.txt", T0 + 901, S3Code::RequestTimeTooSkewed);
    check(&good, "/test.txt", T0 - 901, S3Code::RequestTimeTooSkewed);
    run("GET", "/test.txt", None, &good, T0 + 900).unwrap();
    // Signature with one flipped nibble, upper-case hex, short.
    let flipped = format!("0{}", &GET_SIG[1..]);
    check(
        &get_object_headers(&auth(&flipped, signed)),
        "/test.txt",
        T0,
        S3Code::SignatureDoesNotMatch,
    );
    check(
        &get_object_headers(&auth(&GET_SIG.to_uppercase(), signed)),
        "/test.txt",
        T0,
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        &get_object_headers(&auth(&GET_SIG[..60], signed)),
        "/test.txt",
        T0,
        S3Code::AuthorizationHeaderMalformed,
    );
}

#[test]
fn malformed_headers() {
    let signed = "host;range;x-amz-content-sha256;x-amz-date";
    let check = |authz: String, code: S3Code| {
        let h = get_object_headers(&authz);
        let e = run("GET", "/test.txt", None, &h, T0).unwrap_err();
        assert_eq!(e.code, code, "{authz}: {e}");
    };
    check(format!("AWS {AK}:abc"), S3Code::InvalidRequest);
    check(
        format!("AWS4-HMAC-SHA1 Credential={AK}/20130524/us-east-1/s3/aws4_request"),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        auth(GET_SIG, "range;x-amz-content-sha256;x-amz-date"),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        auth(GET_SIG, "range;host;x-amz-content-sha256;x-amz-date"),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        auth(GET_SIG, "host;host;range"),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        auth(GET_SIG, "host;range;x-amz-content-sha256"),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        auth(
            GET_SIG,
            "host;range;x-amz-content-sha256;x-amz-date;x-missing",
        ),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        auth(GET_SIG, "Host;range"),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        format!(
            "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/ec2/aws4_request,SignedHeaders={signed},Signature={GET_SIG}"
        ),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        format!(
            "AWS4-HMAC-SHA256 Credential={AK}/20130525/us-east-1/s3/aws4_request,SignedHeaders={signed},Signature={GET_SIG}"
        ),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        format!(
            "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3,SignedHeaders={signed},Signature={GET_SIG}"
        ),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        format!(
            "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request,SignedHeaders={signed}"
        ),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        format!(
            "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request,SignedHeaders={signed},Signature={GET_SIG},Signature={GET_SIG}"
        ),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        format!(
            "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request,SignedHeaders={signed},Signature={GET_SIG},Foo=bar"
        ),
        S3Code::AuthorizationHeaderMalformed,
    );
    check(
        format!(
            "AWS4-HMAC-SHA256Credential={AK}/20130524/us-east-1/s3/aws4_request,SignedHeaders={signed},Signature={GET_SIG}"
        ),
        S3Code::AuthorizationHeaderMalformed,
    );
    check("x".repeat(10_000), S3Code::AuthorizationHeaderMalformed);
    // Missing x-amz-content-sha256 / date, anonymous.
    let mut h = get_object_headers(&auth(GET_SIG, signed));
    h.remove(2);
    assert_eq!(
        run("GET", "/test.txt", None, &h, T0).unwrap_err().code,
        S3Code::InvalidRequest
    );
    let mut h = get_object_headers(&auth(GET_SIG, "host;range;x-amz-content-sha256"));
    h.remove(3);
    assert_eq!(
        run("GET", "/test.txt", None, &h, T0).unwrap_err().code,
        S3Code::AccessDenied
    );
    let h = vec![("host", HOST.to_owned())];
    assert_eq!(
        run("GET", "/test.txt", None, &h, T0).unwrap_err().code,
        S3Code::AccessDenied
    );
    let mut h = get_object_headers(&auth(GET_SIG, signed));
    h[2].1 = "nothex".into();
    assert_eq!(
        run("GET", "/test.txt", None, &h, T0).unwrap_err().code,
        S3Code::InvalidArgument
    );
    let h = get_object_headers(&auth(GET_SIG, signed));
    assert_eq!(
        run("GET", "/test%zz", None, &h, T0).unwrap_err().code,
        S3Code::InvalidArgument
    );
    assert_eq!(
        run("GET", "/t", Some("a=%"), &h, T0).unwrap_err().code,
        S3Code::InvalidArgument
    );
    let long = "/".repeat(MAX_PATH_LEN + 1);
    assert!(run("GET", &long, None, &h, T0).is_err());
}

#[test]
fn payload_modes() {
    assert_eq!(
        PayloadMode::parse(STREAMING_PAYLOAD).unwrap(),
        PayloadMode::Streaming {
            signed: true,
            trailer: false
        }
    );
    assert_eq!(
        PayloadMode::parse(STREAMING_PAYLOAD_TRAILER).unwrap(),
        PayloadMode::Streaming {
            signed: true,
            trailer: true
        }
    );
    assert_eq!(
        PayloadMode::parse(STREAMING_UNSIGNED_TRAILER).unwrap(),
        PayloadMode::Streaming {
            signed: false,
            trailer: true
        }
    );
    assert_eq!(
        PayloadMode::parse(UNSIGNED_PAYLOAD).unwrap(),
        PayloadMode::Unsigned
    );
    assert_eq!(
        PayloadMode::parse("STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD")
            .unwrap_err()
            .code,
        S3Code::NotImplemented
    );
    assert_eq!(
        PayloadMode::parse("abc").unwrap_err().code,
        S3Code::InvalidArgument
    );
    assert_eq!(
        PayloadMode::parse(&"g".repeat(64)).unwrap_err().code,
        S3Code::InvalidArgument
    );
}

#[test]
fn sign_then_verify_round_trip_with_odd_keys_and_queries() {
    let c = creds();
    let ts = amz_date(T0 + 42);
    let params = SigningParams {
        credentials: &c,
        region: "eu-west-3",
        timestamp: &ts,
    };
    let path = "/bucket/dir/a%20b%2Bc%C3%A9~x.y_z-!";
    let query = "prefix=a%20b&delimiter=%2F&list-type=2&empty&x=%2a";
    let hv = [
        ("host", "localhost:9000"),
        ("x-amz-date", ts.as_str()),
        ("x-amz-content-sha256", UNSIGNED_PAYLOAD),
        ("x-amz-meta-a", "  two   spaces  "),
    ];
    let headers = hdrs(&hv);
    let parts = RequestParts {
        method: "PUT",
        raw_path: path,
        raw_query: Some(query),
        headers: &headers,
    };
    let signed = ["host", "x-amz-content-sha256", "x-amz-date", "x-amz-meta-a"];
    let authz = sign_request(&parts, &params, &signed, UNSIGNED_PAYLOAD).unwrap();
    let mut all = headers.clone();
    all.push(("authorization", authz.as_bytes()));
    let parts = RequestParts {
        headers: &all,
        ..parts
    };
    let a = verify(&parts, &c, T0).unwrap();
    assert_eq!(a.region, "eu-west-3");
    assert_eq!(a.timestamp, ts);
    assert_eq!(a.payload, PayloadMode::Unsigned);
    assert_eq!(a.signing_key, signing_key(SK, "20130524", "eu-west-3"));
    // Collapsing whitespace makes this equivalent…
    let mut alt = all.clone();
    alt[3] = ("x-amz-meta-a", b"two spaces");
    verify(
        &RequestParts {
            headers: &alt,
            ..parts
        },
        &c,
        T0,
    )
    .unwrap();
    // …but other changes are not.
    alt[3] = ("x-amz-meta-a", b"two  spaces!");
    assert_eq!(
        verify(
            &RequestParts {
                headers: &alt,
                ..parts
            },
            &c,
            T0
        )
        .unwrap_err()
        .code,
        S3Code::SignatureDoesNotMatch
    );
    // %2B vs + are different keys.
    let p2 = RequestParts {
        raw_path: "/bucket/dir/a%20b+c%C3%A9~x.y_z-!",
        ..parts
    };
    verify(&p2, &c, T0).unwrap();
    let p3 = RequestParts {
        raw_path: "/bucket/dir/a%20b%2Cc%C3%A9~x.y_z-!",
        ..parts
    };
    assert_eq!(
        verify(&p3, &c, T0).unwrap_err().code,
        S3Code::SignatureDoesNotMatch
    );
    // Presigned round trip with an existing query.
    let headers = hdrs(&[("host", "localhost:9000")]);
    let parts = RequestParts {
        method: "GET",
        raw_path: path,
        raw_query: Some("versionId=3"),
        headers: &headers,
    };
    let q = presign(&parts, &params, 60, &["host"]).unwrap();
    let parts = RequestParts {
        raw_query: Some(&q),
        ..parts
    };
    verify(&parts, &c, T0 + 100).unwrap();
    assert_eq!(
        verify(&parts, &c, T0 + 103).unwrap_err().code,
        S3Code::AccessDenied
    );
}

#[test]
fn date_header_instead_of_x_amz_date() {
    let c = creds();
    let hv = [
        ("host", HOST),
        ("date", "Fri, 24 May 2013 00:00:00 GMT"),
        ("x-amz-content-sha256", EMPTY_SHA256),
    ];
    let headers = hdrs(&hv);
    let parts = RequestParts {
        method: "GET",
        raw_path: "/x",
        raw_query: None,
        headers: &headers,
    };
    let params = SigningParams {
        credentials: &c,
        region: "us-east-1",
        timestamp: "20130524T000000Z",
    };
    let authz = sign_request(
        &parts,
        &params,
        &["date", "host", "x-amz-content-sha256"],
        EMPTY_SHA256,
    )
    .unwrap();
    let mut all = headers.clone();
    all.push(("authorization", authz.as_bytes()));
    let a = verify(
        &RequestParts {
            headers: &all,
            ..parts
        },
        &c,
        T0,
    )
    .unwrap();
    assert_eq!(a.timestamp, "20130524T000000Z");
    assert_eq!(a.request_time, T0);
}

#[test]
fn auth_kinds() {
    let h = hdrs(&[("Authorization", "x")]);
    let p = RequestParts {
        method: "GET",
        raw_path: "/",
        raw_query: None,
        headers: &h,
    };
    assert_eq!(auth_kind(&p), AuthKind::Header);
    let p = RequestParts {
        method: "GET",
        raw_path: "/",
        raw_query: Some("a=1&X-Amz-Algorithm=x"),
        headers: &[],
    };
    assert_eq!(auth_kind(&p), AuthKind::Presigned);
    // Any presigned parameter claims a signature: an open endpoint must verify it.
    for q in [
        "X-Amz-Signature=ab",
        "X-Amz-Credential=k",
        "AWSAccessKeyId=k&Signature=x",
    ] {
        let p = RequestParts {
            method: "GET",
            raw_path: "/",
            raw_query: Some(q),
            headers: &[],
        };
        assert_eq!(auth_kind(&p), AuthKind::Presigned, "{q}");
    }
    let p = RequestParts {
        method: "GET",
        raw_path: "/",
        raw_query: Some("a=1"),
        headers: &[],
    };
    assert_eq!(auth_kind(&p), AuthKind::Anonymous);
}

#[test]
fn debug_redacts_secrets() {
    let s = format!("{:?}", creds());
    assert!(!s.contains(SK));
}

#[test]
fn signature_version_2_is_refused_with_a_pointer_to_v4() {
    let headers: Vec<Header<'_>> = vec![("host", b"h"), ("authorization", b"AWS AKID:c2ln")];
    let parts = RequestParts {
        method: "GET",
        raw_path: "/b/k",
        raw_query: None,
        headers: &headers,
    };
    let keys: HashMap<String, String> = HashMap::new();
    let e = verify(&parts, &keys, 0).unwrap_err();
    assert_eq!(e.code, S3Code::InvalidRequest);
    assert!(e.message.contains("Version 4"), "{}", e.message);
    let parts = RequestParts {
        method: "GET",
        raw_path: "/b/k",
        raw_query: Some("AWSAccessKeyId=AKID&Expires=1&Signature=c2ln"),
        headers: &headers[..1],
    };
    let e = verify(&parts, &keys, 0).unwrap_err();
    assert!(e.message.contains("s3v4"), "{}", e.message);
}
