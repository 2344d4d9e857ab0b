"""Real S3 clients against Meridian's S3-compatible endpoint (loopback).

Run by scripts/s3-clients.sh: python s3_clients.py ENDPOINT KEY SECRET [--cluster OTHER].
Uses boto3 (path-style addressing, region us-east-1, few retries) and the AWS CLI from the
same venv: buckets, small objects with metadata, a 64 MiB multipart upload by upload_fileobj
with Range reads, low-level multipart and its errors, ListObjectsV2 pagination/delimiters,
CopyObject, DeleteObjects, presigned URLs (SigV4), authentication failures, Content-MD5, boto3's
default flexible checksums (a CRC32 header over http; aws-chunked bodies with a CRC32 trailer
over https, through a local TLS relay) and `when_required`, DeleteBucket, and `aws s3`
mb/cp/ls/rm/rb. With --cluster OTHER, objects written through ENDPOINT are read back
through OTHER (a node of another DC). Prints `ok   name` / `FAIL name: why` per check and
`s3-clients: N passed, M failed` last; exits non-zero on any failure.
"""

import argparse
import asyncio
import base64
import hashlib
import io
import json
import os
import random
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

import boto3
import botocore
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

PASSED = 0
FAILED = 0
MiB = 1024 * 1024


def check(name, fn):
    global PASSED, FAILED
    try:
        fn()
        PASSED += 1
        print(f"ok   {name}", flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported, then counted
        FAILED += 1
        why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        print(f"FAIL {name}: {why}", flush=True)
        traceback.print_exc(file=sys.stderr)


def client(endpoint, key, secret, verify=None, **extra):
    cfg = Config(
        s3={"addressing_style": "path"},
        region_name="us-east-1",
        retries={"total_max_attempts": 2, "mode": "standard"},
        connect_timeout=10,
        read_timeout=120,
        **extra,
    )
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
        region_name="us-east-1", config=cfg, verify=verify,
    )


def expect_error(fn, code=None, status=None):
    """Runs fn, which must fail with S3 error `code` (and HTTP `status`)."""
    try:
        fn()
    except ClientError as e:
        got_code = e.response.get("Error", {}).get("Code")
        got_status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code is not None and str(got_code) != code:
            raise AssertionError(f"want error {code}, got {got_code} ({got_status}): {e}") from e
        if status is not None and got_status != status:
            raise AssertionError(f"want status {status}, got {got_status} ({got_code}): {e}") from e
        return e
    raise AssertionError(f"want error {code or status}, the request succeeded")


class TlsRelay:
    """A TLS front for the plain-HTTP endpoint (a throwaway self-signed certificate, bytes
    relayed unchanged, so the Host header and signatures are the client's). botocore sends
    aws-chunked bodies with checksum trailers (STREAMING-UNSIGNED-PAYLOAD-TRAILER) only over
    https: this is how a real client's trailers reach the endpoint."""

    def __init__(self, endpoint):
        u = urllib.parse.urlsplit(endpoint)
        self.backend = (u.hostname, u.port)
        self.dir = tempfile.TemporaryDirectory()
        cert, key = os.path.join(self.dir.name, "cert.pem"), os.path.join(self.dir.name, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", cert],
                       check=True, capture_output=True, timeout=60)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.port = None

        async def start():
            server = await asyncio.start_server(self._conn, "127.0.0.1", 0, ssl=self.ctx)
            self.port = server.sockets[0].getsockname()[1]
            started.set()

        def run():
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(start())
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        if not started.wait(30):
            raise RuntimeError("the TLS relay did not start")
        self.url = f"https://127.0.0.1:{self.port}"

    async def _conn(self, reader, writer):
        try:
            br, bw = await asyncio.open_connection(*self.backend)
        except OSError:
            writer.close()
            return

        async def pump(r, w):
            try:
                while data := await r.read(1 << 16):
                    w.write(data)
                    await w.drain()
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
                pass
            finally:
                w.close()

        await asyncio.gather(pump(reader, bw), pump(br, writer), return_exceptions=True)


class SentHeaders:
    """The headers (lower-cased) of every request a client sends inside the `with`."""

    def __init__(self, c):
        self.c, self.sent = c, []

    def _hook(self, request, **_):
        self.sent.append({k.lower(): (v.decode() if isinstance(v, bytes) else str(v))
                          for k, v in request.headers.items()})

    def __enter__(self):
        self.c.meta.events.register("before-send.s3", self._hook)
        return self.sent

    def __exit__(self, *exc):
        self.c.meta.events.unregister("before-send.s3", self._hook)


def md5_etag(data):
    return '"' + hashlib.md5(data).hexdigest() + '"'


def eventually(fn, timeout=20.0):
    """fn() until it stops raising (replication to another DC is eventual)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except Exception:  # noqa: BLE001
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def http_error(url, method="GET", data=None, headers=None):
    """(status, S3 error code or None, body) of a plain urllib request."""
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, None, r.read()
    except urllib.error.HTTPError as e:
        body = e.read()
        code = None
        try:
            code = ET.fromstring(body).findtext("Code")
        except ET.ParseError:
            pass
        return e.code, code, body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("key")
    ap.add_argument("secret")
    ap.add_argument("--cluster", metavar="OTHER_ENDPOINT")
    args = ap.parse_args()
    ep, key, secret = args.endpoint, args.key, args.secret

    s3 = client(ep, key, secret)  # botocore's defaults: flexible checksums when supported
    s3_req = client(ep, key, secret, request_checksum_calculation="when_required",
                    response_checksum_validation="when_required")
    other = client(args.cluster, key, secret) if args.cluster else None
    # boto3 presigns with SigV2 query auth in us-east-1 unless told s3v4; the endpoint
    # verifies SigV4 only.
    s3_v4 = client(ep, key, secret, signature_version="s3v4")
    tag = os.urandom(4).hex()
    bucket = f"s3c-{tag}-main"
    lbucket = f"s3c-{tag}-list"
    cbucket = f"s3c-{tag}-copy"
    print(f"s3-clients: boto3 {boto3.__version__}, botocore {botocore.__version__}, endpoint {ep}"
          + (f", other DC {args.cluster}" if other else ""), flush=True)

    # --- buckets -------------------------------------------------------------------------
    def create_bucket():
        for b in (bucket, lbucket, cbucket):
            r = s3.create_bucket(Bucket=b)
            assert r["ResponseMetadata"]["HTTPStatusCode"] == 200, r
        s3.head_bucket(Bucket=bucket)
        loc = s3.get_bucket_location(Bucket=bucket)["LocationConstraint"]
        assert loc in (None, "us-east-1"), loc
        names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
        assert {bucket, lbucket, cbucket} <= set(names), names

    def create_again():
        expect_error(lambda: s3.create_bucket(Bucket=bucket), "BucketAlreadyOwnedByYou", 409)

    def head_missing_bucket():
        expect_error(lambda: s3.head_bucket(Bucket=f"s3c-{tag}-missing"), "404", 404)
        expect_error(lambda: s3.list_objects_v2(Bucket=f"s3c-{tag}-missing"), "NoSuchBucket", 404)

    def invalid_bucket_name():
        # Pass botocore's own (lenient) check, fail S3's naming rules.
        for name in ("ab", "Upper-Case-Bucket", "under_score", "-leading-dash", "a..b"):
            expect_error(lambda n=name: s3.create_bucket(Bucket=n), "InvalidBucketName", 400)

    check("create-bucket, head-bucket, list-buckets", create_bucket)
    check("create-bucket again -> BucketAlreadyOwnedByYou", create_again)
    check("head-bucket of a missing bucket -> 404", head_missing_bucket)
    check("invalid bucket names -> InvalidBucketName", invalid_bucket_name)

    # --- small objects, metadata, checksums ----------------------------------------------
    small = b"hello, meridian\n" * 10

    def small_object():
        r = s3.put_object(Bucket=bucket, Key="small.txt", Body=small, ContentType="text/plain",
                          Metadata={"colour": "blue", "owner": "ada"})
        assert r["ETag"] == md5_etag(small), (r["ETag"], md5_etag(small))
        h = s3.head_object(Bucket=bucket, Key="small.txt")
        assert h["ContentLength"] == len(small), h
        assert h["ContentType"] == "text/plain", h["ContentType"]
        assert h["Metadata"] == {"colour": "blue", "owner": "ada"}, h["Metadata"]
        assert h["ETag"] == md5_etag(small), h["ETag"]
        g = s3.get_object(Bucket=bucket, Key="small.txt")
        assert g["Body"].read() == small
        assert g["ContentType"] == "text/plain" and g["Metadata"]["colour"] == "blue", g
        assert g["ETag"] == md5_etag(small)

    def default_checksums():
        # botocore >= 1.36 sends an aws-chunked body with an x-amz-checksum-crc32 trailer.
        data = os.urandom(300_000)
        with SentHeaders(s3) as sent:
            r = s3.put_object(Bucket=bucket, Key="crc/default.bin", Body=data)
        crc = [h for h in sent if "x-amz-checksum-crc32" in (h.get("x-amz-trailer", "") + " ".join(h))]
        assert crc, f"botocore sent no CRC32 checksum: {sent}"
        assert r["ETag"] == md5_etag(data), r["ETag"]
        assert s3.get_object(Bucket=bucket, Key="crc/default.bin")["Body"].read() == data
        data2 = os.urandom(70_000)
        s3.put_object(Bucket=bucket, Key="crc/sha256.bin", Body=data2, ChecksumAlgorithm="SHA256")
        assert s3.get_object(Bucket=bucket, Key="crc/sha256.bin")["Body"].read() == data2

    def when_required_checksums():
        data = os.urandom(123_457)
        with SentHeaders(s3_req) as sent:
            r = s3_req.put_object(Bucket=bucket, Key="crc/when-required.bin", Body=data)
        assert not any("x-amz-trailer" in h or any(k.startswith("x-amz-checksum-") for k in h)
                       for h in sent), f"a checksum was sent: {sent}"
        assert r["ETag"] == md5_etag(data), r["ETag"]
        assert s3_req.get_object(Bucket=bucket, Key="crc/when-required.bin")["Body"].read() == data

    def wrong_checksum():
        data = b"checksummed body"
        expect_error(lambda: s3_req.put_object(Bucket=bucket, Key="crc/wrong.bin", Body=data,
                                               ChecksumCRC32="AAAAAA=="), "BadDigest", 400)
        expect_error(lambda: s3.head_object(Bucket=bucket, Key="crc/wrong.bin"), "404", 404)

    def conditional_get():
        etag = md5_etag(small)
        assert s3.get_object(Bucket=bucket, Key="small.txt", IfMatch=etag)["Body"].read() == small
        expect_error(lambda: s3.get_object(Bucket=bucket, Key="small.txt", IfMatch='"' + "0" * 32 + '"'),
                     "PreconditionFailed", 412)
        expect_error(lambda: s3.get_object(Bucket=bucket, Key="small.txt", IfNoneMatch=etag), "304", 304)
        r = s3.get_object(Bucket=bucket, Key="small.txt", IfNoneMatch='"' + "0" * 32 + '"')
        assert r["Body"].read() == small

    check("put/get small object: Content-Type, x-amz-meta-*, ETag == md5", small_object)
    check("conditional GET: If-Match -> 412, If-None-Match -> 304", conditional_get)
    check("put with boto3's default flexible checksums (aws-chunked + CRC32 trailer)", default_checksums)
    check("put with request_checksum_calculation=when_required", when_required_checksums)
    check("put with a wrong x-amz-checksum-crc32 -> BadDigest, no object", wrong_checksum)

    relay = None

    def start_relay():
        nonlocal relay
        relay = TlsRelay(ep)

    check("a TLS relay in front of the endpoint (for aws-chunked trailers)", start_relay)
    if relay is not None:
        warnings.filterwarnings("ignore", message="Unverified HTTPS request")
        s3_tls = client(relay.url, key, secret, verify=False)

        def trailer_put():
            data = os.urandom(MiB + 333)
            with SentHeaders(s3_tls) as sent:
                r = s3_tls.put_object(Bucket=bucket, Key="crc/trailer.bin", Body=data,
                                      ContentType="application/x-trailer", Metadata={"via": "tls"})
            h = sent[-1]
            assert h.get("x-amz-content-sha256") == "STREAMING-UNSIGNED-PAYLOAD-TRAILER", h
            assert h.get("x-amz-trailer") == "x-amz-checksum-crc32", h
            assert "aws-chunked" in h.get("content-encoding", ""), h
            assert r["ETag"] == md5_etag(data), r["ETag"]
            g = s3.get_object(Bucket=bucket, Key="crc/trailer.bin")
            assert g["Body"].read() == data, "bytes differ"
            assert g["ContentType"] == "application/x-trailer" and g["Metadata"] == {"via": "tls"}, g
            assert "aws-chunked" not in g.get("ContentEncoding", ""), g.get("ContentEncoding")

        def trailer_multipart():
            data = os.urandom(20 * MiB + 12345)
            with SentHeaders(s3_tls) as sent:
                s3_tls.upload_fileobj(io.BytesIO(data), bucket, "crc/trailer-mp.bin", Config=TransferConfig(
                    multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB, max_concurrency=3))
            assert sum(h.get("x-amz-trailer") == "x-amz-checksum-crc32" for h in sent) == 3, sent
            h = s3.head_object(Bucket=bucket, Key="crc/trailer-mp.bin")
            assert h["ContentLength"] == len(data) and h["ETag"].endswith('-3"'), h
            assert s3.get_object(Bucket=bucket, Key="crc/trailer-mp.bin")["Body"].read() == data

        def trailer_when_required():
            c = client(relay.url, key, secret, verify=False, request_checksum_calculation="when_required")
            data = os.urandom(200_000)
            with SentHeaders(c) as sent:
                c.put_object(Bucket=bucket, Key="crc/tls-when-required.bin", Body=data)
            assert "x-amz-trailer" not in sent[-1], sent[-1]
            assert s3.get_object(Bucket=bucket, Key="crc/tls-when-required.bin")["Body"].read() == data

        check("put over TLS: aws-chunked body with a CRC32 trailer (boto3's defaults)", trailer_put)
        check("upload_fileobj over TLS: 3 parts with CRC32 trailers", trailer_multipart)
        check("put over TLS with request_checksum_calculation=when_required", trailer_when_required)

    # --- a 64 MiB multipart upload ---------------------------------------------------------
    big = os.urandom(64 * MiB)
    tc = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB, max_concurrency=4)

    def big_upload():
        s3.upload_fileobj(io.BytesIO(big), bucket, "big/64MiB.bin", Config=tc)
        h = s3.head_object(Bucket=bucket, Key="big/64MiB.bin")
        assert h["ContentLength"] == len(big), h["ContentLength"]
        assert h["ETag"].endswith('-8"'), h["ETag"]
        got = s3.get_object(Bucket=bucket, Key="big/64MiB.bin")["Body"].read()
        assert len(got) == len(big) and got == big, "downloaded bytes differ"
        buf = io.BytesIO()
        s3.download_fileobj(bucket, "big/64MiB.bin", buf, Config=tc)
        assert buf.getvalue() == big, "download_fileobj bytes differ"

    def range_reads():
        rng = random.Random()
        for _ in range(20):
            a = rng.randrange(len(big))
            b = min(len(big) - 1, a + rng.randrange(1, 2 * MiB))
            r = s3.get_object(Bucket=bucket, Key="big/64MiB.bin", Range=f"bytes={a}-{b}")
            assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
            assert r["ContentRange"] == f"bytes {a}-{b}/{len(big)}", r["ContentRange"]
            assert r["Body"].read() == big[a:b + 1], f"range {a}-{b} differs"

    def suffix_and_open_ranges():
        r = s3.get_object(Bucket=bucket, Key="big/64MiB.bin", Range="bytes=-100")
        assert r["ContentRange"] == f"bytes {len(big) - 100}-{len(big) - 1}/{len(big)}", r["ContentRange"]
        assert r["Body"].read() == big[-100:]
        n = len(big) - 3 * MiB - 17
        r = s3.get_object(Bucket=bucket, Key="big/64MiB.bin", Range=f"bytes={n}-")
        assert r["ContentLength"] == len(big) - n
        assert r["Body"].read() == big[n:]

    def unsatisfiable_range():
        expect_error(lambda: s3.get_object(Bucket=bucket, Key="big/64MiB.bin",
                                           Range=f"bytes={len(big)}-"), "InvalidRange", 416)

    check("64 MiB upload_fileobj (8 parts): size, ETag -8, download equal", big_upload)
    check("20 random Range reads equal the slices", range_reads)
    check("suffix range bytes=-100 and open range bytes=N-", suffix_and_open_ranges)
    check("unsatisfiable range -> 416 InvalidRange", unsatisfiable_range)

    if other is not None:
        def read_through_other_dc():
            eventually(lambda: other.head_bucket(Bucket=bucket))
            h = eventually(lambda: other.head_object(Bucket=bucket, Key="big/64MiB.bin"), 30)
            assert h["ContentLength"] == len(big), h

            def full():
                got = other.get_object(Bucket=bucket, Key="big/64MiB.bin")["Body"].read()
                assert got == big, "bytes through the other DC differ"
            eventually(full, 30)
            g = eventually(lambda: other.get_object(Bucket=bucket, Key="small.txt"))
            assert g["Body"].read() == small and g["Metadata"]["owner"] == "ada", g
            r = other.get_object(Bucket=bucket, Key="big/64MiB.bin", Range="bytes=1000-2000")
            assert r["Body"].read() == big[1000:2001]
            back = os.urandom(3 * MiB + 5)
            other.put_object(Bucket=bucket, Key="from-other-dc.bin", Body=back)

            def reverse():
                assert s3.get_object(Bucket=bucket, Key="from-other-dc.bin")["Body"].read() == back
            eventually(reverse, 30)

        check("object written via one DC read back byte-equal via the other DC", read_through_other_dc)

    # --- low-level multipart ---------------------------------------------------------------
    parts_data = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(1024)]

    def explicit_multipart():
        k = "mp/explicit.bin"
        up = s3.create_multipart_upload(Bucket=bucket, Key=k, ContentType="application/x-test")
        uid = up["UploadId"]
        etags = []
        for i, d in enumerate(parts_data, 1):
            r = s3.upload_part(Bucket=bucket, Key=k, UploadId=uid, PartNumber=i, Body=d)
            assert r["ETag"] == md5_etag(d), (i, r["ETag"])
            etags.append(r["ETag"])
        ups = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        assert any(u["UploadId"] == uid and u["Key"] == k for u in ups), ups
        lp = s3.list_parts(Bucket=bucket, Key=k, UploadId=uid)
        got = [(p["PartNumber"], p["Size"], p["ETag"]) for p in lp["Parts"]]
        want = [(i, len(d), e) for i, (d, e) in enumerate(zip(parts_data, etags), 1)]
        assert got == want, got
        r = s3.complete_multipart_upload(
            Bucket=bucket, Key=k, UploadId=uid,
            MultipartUpload={"Parts": [{"PartNumber": i, "ETag": e} for i, e in enumerate(etags, 1)]})
        want_etag = hashlib.md5(b"".join(bytes.fromhex(e.strip('"')) for e in etags)).hexdigest()
        assert r["ETag"] == f'"{want_etag}-3"', (r["ETag"], want_etag)
        g = s3.get_object(Bucket=bucket, Key=k)
        assert g["Body"].read() == b"".join(parts_data), "completed object differs"
        assert g["ContentType"] == "application/x-test", g["ContentType"]

    def abort_then_upload():
        k = "mp/aborted.bin"
        uid = s3.create_multipart_upload(Bucket=bucket, Key=k)["UploadId"]
        s3.upload_part(Bucket=bucket, Key=k, UploadId=uid, PartNumber=1, Body=b"x" * 1000)
        s3.abort_multipart_upload(Bucket=bucket, Key=k, UploadId=uid)
        expect_error(lambda: s3.upload_part(Bucket=bucket, Key=k, UploadId=uid, PartNumber=2,
                                            Body=b"y" * 1000), "NoSuchUpload", 404)
        expect_error(lambda: s3.list_parts(Bucket=bucket, Key=k, UploadId=uid), "NoSuchUpload", 404)
        expect_error(lambda: s3.head_object(Bucket=bucket, Key=k), "404", 404)

    def uploads_by_prefix():
        keys = ["up/a/1", "up/a/2", "up/b/1", "up/c", "other/x"]
        ids = {k: s3.create_multipart_upload(Bucket=bucket, Key=k)["UploadId"] for k in keys}
        try:
            r = s3.list_multipart_uploads(Bucket=bucket, Prefix="up/")
            got = sorted(u["Key"] for u in r.get("Uploads", []))
            assert got == ["up/a/1", "up/a/2", "up/b/1", "up/c"], got
            assert r["Prefix"] == "up/", r["Prefix"]
            r = s3.list_multipart_uploads(Bucket=bucket, Prefix="up/", Delimiter="/")
            got = sorted(u["Key"] for u in r.get("Uploads", []))
            assert got == ["up/c"], got
            cps = sorted(p["Prefix"] for p in r.get("CommonPrefixes", []))
            assert cps == ["up/a/", "up/b/"], cps
            assert r["Delimiter"] == "/", r
        finally:
            for k, uid in ids.items():
                s3.abort_multipart_upload(Bucket=bucket, Key=k, UploadId=uid)

    def failed_complete(k, uploads, parts, code):
        uid = s3.create_multipart_upload(Bucket=bucket, Key=k)["UploadId"]
        try:
            etags = {}
            for n, d in uploads:
                etags[n] = s3.upload_part(Bucket=bucket, Key=k, UploadId=uid, PartNumber=n, Body=d)["ETag"]
            listed = [{"PartNumber": n, "ETag": etag or etags[n]} for n, etag in parts]
            expect_error(lambda: s3.complete_multipart_upload(
                Bucket=bucket, Key=k, UploadId=uid, MultipartUpload={"Parts": listed}), code, 400)
            # A failed Complete leaves the upload open and no object.
            assert len(s3.list_parts(Bucket=bucket, Key=k, UploadId=uid)["Parts"]) == len(uploads)
            expect_error(lambda: s3.head_object(Bucket=bucket, Key=k), "404", 404)
        finally:
            s3.abort_multipart_upload(Bucket=bucket, Key=k, UploadId=uid)

    def wrong_etag():
        failed_complete("mp/wrong-etag.bin", [(1, parts_data[0]), (2, b"tail")],
                        [(1, None), (2, '"0123456789abcdef0123456789abcdef"')], "InvalidPart")

    def out_of_order():
        failed_complete("mp/order.bin", [(1, parts_data[0]), (2, b"tail")],
                        [(2, None), (1, None)], "InvalidPartOrder")

    def too_small():
        failed_complete("mp/small.bin", [(1, b"a" * 1024), (2, b"b" * 1024)],
                        [(1, None), (2, None)], "EntityTooSmall")

    check("multipart: create, 3 parts (5 MiB, 5 MiB, 1 KiB), list-parts, complete", explicit_multipart)
    check("multipart: upload_part after abort -> NoSuchUpload", abort_then_upload)
    check("list_multipart_uploads with Prefix, and Delimiter -> CommonPrefixes", uploads_by_prefix)
    check("multipart: complete with a wrong ETag -> InvalidPart", wrong_etag)
    check("multipart: parts out of order -> InvalidPartOrder", out_of_order)
    check("multipart: a too-small non-last part -> EntityTooSmall", too_small)

    # --- listing -------------------------------------------------------------------------
    dir_keys = [f"dir/k{i:02d}" for i in range(25)]
    all_keys = dir_keys + ["other/x"]

    def fill():
        for k in all_keys:
            s3.put_object(Bucket=lbucket, Key=k, Body=k.encode())

    def paginate():
        seen, token, pages = [], None, 0
        while True:
            kw = {"ContinuationToken": token} if token else {}
            r = s3.list_objects_v2(Bucket=lbucket, MaxKeys=10, **kw)
            pages += 1
            seen += [o["Key"] for o in r.get("Contents", [])]
            assert r["KeyCount"] == len(r.get("Contents", [])), r["KeyCount"]
            if not r["IsTruncated"]:
                break
            token = r["NextContinuationToken"]
            assert pages < 10, "pagination does not end"
        assert seen == all_keys, seen
        assert pages == 3, pages
        # boto3's paginator does the same.
        pg = s3.get_paginator("list_objects_v2").paginate(Bucket=lbucket, PaginationConfig={"PageSize": 7})
        assert [o["Key"] for p in pg for o in p.get("Contents", [])] == all_keys

    def delimiter():
        r = s3.list_objects_v2(Bucket=lbucket, Delimiter="/")
        assert [p["Prefix"] for p in r.get("CommonPrefixes", [])] == ["dir/", "other/"], r
        assert not r.get("Contents"), r.get("Contents")
        r = s3.list_objects_v2(Bucket=lbucket, Delimiter="/", Prefix="other/")
        assert [o["Key"] for o in r["Contents"]] == ["other/x"] and not r.get("CommonPrefixes"), r

    def prefix():
        r = s3.list_objects_v2(Bucket=lbucket, Prefix="dir/k1")
        assert [o["Key"] for o in r["Contents"]] == [f"dir/k1{i}" for i in range(10)], r
        o = r["Contents"][0]
        assert o["Size"] == len(b"dir/k10") and o["ETag"] == md5_etag(b"dir/k10"), o

    def start_after():
        r = s3.list_objects_v2(Bucket=lbucket, StartAfter="dir/k20")
        assert [o["Key"] for o in r["Contents"]] == ["dir/k21", "dir/k22", "dir/k23", "dir/k24", "other/x"], r
        r = s3.list_objects_v2(Bucket=lbucket, StartAfter="other/x")
        assert not r.get("Contents") and r["KeyCount"] == 0, r

    check("put 26 keys for listing", fill)
    check("list_objects_v2 MaxKeys=10 + ContinuationToken: 26 keys in order once", paginate)
    check("list_objects_v2 Delimiter='/' -> CommonPrefixes dir/, other/", delimiter)
    check("list_objects_v2 Prefix='dir/k1' -> k10..k19", prefix)
    check("list_objects_v2 StartAfter", start_after)

    # --- copy ----------------------------------------------------------------------------
    def copy_within():
        r = s3.copy_object(Bucket=bucket, Key="copies/small.txt",
                           CopySource={"Bucket": bucket, "Key": "small.txt"})
        assert r["CopyObjectResult"]["ETag"] == md5_etag(small), r
        h = s3.head_object(Bucket=bucket, Key="copies/small.txt")
        assert h["ContentType"] == "text/plain" and h["Metadata"] == {"colour": "blue", "owner": "ada"}, h
        assert s3.get_object(Bucket=bucket, Key="copies/small.txt")["Body"].read() == small

    def copy_across_replace():
        s3.copy_object(Bucket=cbucket, Key="from-main.csv", CopySource={"Bucket": bucket, "Key": "small.txt"},
                       MetadataDirective="REPLACE", ContentType="text/csv", Metadata={"kind": "copy"})
        h = s3.head_object(Bucket=cbucket, Key="from-main.csv")
        assert h["ContentType"] == "text/csv", h["ContentType"]
        assert h["Metadata"] == {"kind": "copy"}, h["Metadata"]
        assert s3.get_object(Bucket=cbucket, Key="from-main.csv")["Body"].read() == small
        # The source is untouched.
        assert s3.head_object(Bucket=bucket, Key="small.txt")["ContentType"] == "text/plain"
        # A multipart source copies whole.
        s3.copy_object(Bucket=cbucket, Key="mp-copy.bin", CopySource={"Bucket": bucket, "Key": "mp/explicit.bin"})
        assert s3.get_object(Bucket=cbucket, Key="mp-copy.bin")["Body"].read() == b"".join(parts_data)

    check("copy_object within a bucket keeps Content-Type and metadata", copy_within)
    check("copy_object across buckets with MetadataDirective=REPLACE", copy_across_replace)

    # --- delete ----------------------------------------------------------------------------
    def delete_objects():
        r = s3.delete_objects(Bucket=lbucket, Delete={"Objects": [{"Key": k} for k in dir_keys]})
        assert sorted(d["Key"] for d in r.get("Deleted", [])) == dir_keys, r
        assert not r.get("Errors"), r["Errors"]
        r = s3.list_objects_v2(Bucket=lbucket)
        assert [o["Key"] for o in r.get("Contents", [])] == ["other/x"], r

    def delete_missing():
        r = s3.delete_object(Bucket=lbucket, Key="never/was")
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 204, r

    def get_deleted():
        expect_error(lambda: s3.get_object(Bucket=lbucket, Key="dir/k07"), "NoSuchKey", 404)
        expect_error(lambda: s3.head_object(Bucket=lbucket, Key="dir/k07"), "404", 404)

    check("delete_objects of 25 keys, list shows only other/x", delete_objects)
    check("delete_object of a missing key -> 204", delete_missing)
    check("get of a deleted key -> NoSuchKey", get_deleted)

    # --- presigned URLs and authentication -------------------------------------------------
    def presigned():
        url = s3_v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "small.txt"},
                                           ExpiresIn=300)
        with urllib.request.urlopen(url, timeout=30) as r:
            assert r.status == 200 and r.read() == small
        url = s3_v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "big/64MiB.bin"},
                                           ExpiresIn=300)
        req = urllib.request.Request(url, headers={"Range": "bytes=10-19"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 206 and r.read() == big[10:20]

    def presigned_put():
        url = s3_v4.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "presigned-put.bin"},
                                           ExpiresIn=300)
        data = os.urandom(10_000)
        status, code, body = http_error(url, method="PUT", data=data)
        assert status == 200, (status, code, body[:300])
        assert s3.get_object(Bucket=bucket, Key="presigned-put.bin")["Body"].read() == data

    def presigned_expired():
        url = s3_v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "small.txt"},
                                           ExpiresIn=1)
        time.sleep(2.1)
        status, code, _ = http_error(url)
        assert (status, code) == (403, "AccessDenied"), (status, code)

    def presigned_tampered():
        url = s3_v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "small.txt"},
                                           ExpiresIn=300)
        u = urllib.parse.urlsplit(url)
        q = urllib.parse.parse_qsl(u.query)
        sig = dict(q)["X-Amz-Signature"]
        flipped = ("0" if sig[0] != "0" else "1") + sig[1:]
        bad_sig = urllib.parse.urlunsplit(u._replace(query=urllib.parse.urlencode(
            [(k, flipped if k == "X-Amz-Signature" else v) for k, v in q])))
        status, code, _ = http_error(bad_sig)
        assert (status, code) == (403, "SignatureDoesNotMatch"), (status, code)
        other_key = urllib.parse.urlunsplit(u._replace(path=u.path.replace("small.txt", "big/64MiB.bin")))
        status, code, _ = http_error(other_key)
        assert (status, code) == (403, "SignatureDoesNotMatch"), (status, code)

    def wrong_secret():
        bad = client(ep, key, secret + "x")
        expect_error(lambda: bad.list_buckets(), "SignatureDoesNotMatch", 403)
        expect_error(lambda: bad.put_object(Bucket=bucket, Key="intruder", Body=b"x"),
                     "SignatureDoesNotMatch", 403)
        expect_error(lambda: s3.head_object(Bucket=bucket, Key="intruder"), "404", 404)

    def unknown_key():
        bad = client(ep, "NOSUCHKEY" + tag.upper(), secret)
        expect_error(lambda: bad.list_buckets(), "InvalidAccessKeyId", 403)

    def unsigned():
        status, code, _ = http_error(f"{ep}/{bucket}/unsigned.txt", method="PUT", data=b"anon")
        assert (status, code) == (403, "AccessDenied"), (status, code)
        status, code, _ = http_error(f"{ep}/{bucket}/small.txt")
        assert (status, code) == (403, "AccessDenied"), (status, code)
        expect_error(lambda: s3.head_object(Bucket=bucket, Key="unsigned.txt"), "404", 404)

    check("presigned GET URL fetched with urllib", presigned)
    check("tampered presigned URL -> 403", presigned_tampered)
    check("presigned PUT URL with urllib", presigned_put)
    check("expired presigned URL -> 403 AccessDenied", presigned_expired)
    check("wrong secret -> SignatureDoesNotMatch", wrong_secret)
    check("unknown access key -> InvalidAccessKeyId", unknown_key)
    check("unsigned PUT -> 403 AccessDenied", unsigned)

    # --- Content-MD5 -------------------------------------------------------------------------
    def bad_digest():
        wrong = base64.b64encode(hashlib.md5(b"something else").digest()).decode()
        for c in (s3_req, s3):
            expect_error(lambda c=c: c.put_object(Bucket=bucket, Key="small.txt", Body=b"replacement",
                                                  ContentMD5=wrong), "BadDigest", 400)
        g = s3.get_object(Bucket=bucket, Key="small.txt")
        assert g["Body"].read() == small and g["ETag"] == md5_etag(small), "the old value changed"
        right = base64.b64encode(hashlib.md5(b"md5 ok").digest()).decode()
        s3_req.put_object(Bucket=bucket, Key="md5-ok.txt", Body=b"md5 ok", ContentMD5=right)
        assert s3.get_object(Bucket=bucket, Key="md5-ok.txt")["Body"].read() == b"md5 ok"

    check("put_object with a wrong Content-MD5 -> BadDigest, old value kept", bad_digest)

    # --- AWS CLI -----------------------------------------------------------------------------
    def aws_cli():
        aws = os.path.join(os.path.dirname(sys.executable), "aws")
        with tempfile.TemporaryDirectory() as tmp:
            conf = os.path.join(tmp, "config")
            with open(conf, "w") as f:
                f.write("[default]\nregion = us-east-1\nmax_attempts = 2\n"
                        "s3 =\n    addressing_style = path\n")
            env = dict(os.environ, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret,
                       AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=conf,
                       AWS_SHARED_CREDENTIALS_FILE=os.path.join(tmp, "none"),
                       AWS_EC2_METADATA_DISABLED="true", AWS_PAGER="")
            env.pop("AWS_SESSION_TOKEN", None)
            env.pop("AWS_PROFILE", None)

            def run(*argv):
                p = subprocess.run([aws, "--endpoint-url", ep, *argv], env=env, capture_output=True,
                                   text=True, timeout=120)
                if p.returncode != 0:
                    raise AssertionError(f"aws {' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
                return p.stdout

            cb = f"s3c-{tag}-cli"
            local = os.path.join(tmp, "twenty.bin")
            data = os.urandom(20 * MiB)
            with open(local, "wb") as f:
                f.write(data)
            run("s3", "mb", f"s3://{cb}")
            run("s3", "cp", local, f"s3://{cb}/data/twenty.bin")
            ls = run("s3", "ls", f"s3://{cb}/data/")
            assert "twenty.bin" in ls and str(len(data)) in ls, ls
            assert cb in run("s3", "ls"), "aws s3 ls does not list the bucket"
            back = os.path.join(tmp, "back.bin")
            run("s3", "cp", f"s3://{cb}/data/twenty.bin", back)
            with open(back, "rb") as f:
                assert f.read() == data, "aws s3 cp back: bytes differ"
            h = json.loads(run("s3api", "head-object", "--bucket", cb, "--key", "data/twenty.bin"))
            assert h["ContentLength"] == len(data), h
            assert h["ETag"].endswith('-3"'), h["ETag"]  # 8 MiB parts: the CLI's defaults
            run("s3", "cp", local, f"s3://{cb}/data/copy2.bin")
            if relay is not None:
                # Over https the CLI streams aws-chunked parts with CRC32 trailers.
                p = subprocess.run([aws, "--endpoint-url", relay.url, "--no-verify-ssl", "s3", "cp", local,
                                    f"s3://{cb}/data/tls.bin"], env=env, capture_output=True, text=True,
                                   timeout=120)
                assert p.returncode == 0, f"aws s3 cp over TLS: exit {p.returncode}: {p.stderr.strip()}"
                got = s3.get_object(Bucket=cb, Key="data/tls.bin")["Body"].read()
                assert got == data, "aws s3 cp over TLS: bytes differ"
            run("s3", "rm", f"s3://{cb}", "--recursive")
            assert run("s3", "ls", f"s3://{cb}/", "--recursive").strip() == ""
            run("s3", "rb", f"s3://{cb}")
            expect_error(lambda: s3.head_bucket(Bucket=cb), "404", 404)

    check("aws cli: mb, cp 20 MiB (multipart, also over TLS), ls, cp back, head-object, rm --recursive, rb",
          aws_cli)

    # --- deleting buckets ----------------------------------------------------------------------
    def delete_buckets():
        expect_error(lambda: s3.delete_bucket(Bucket=bucket), "BucketNotEmpty", 409)
        for b in (bucket, lbucket, cbucket):
            keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=b)
                    for o in p.get("Contents", [])]
            for i in range(0, len(keys), 1000):
                r = s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})
                assert not r.get("Errors"), r["Errors"]
            for u in s3.list_multipart_uploads(Bucket=b).get("Uploads", []):
                s3.abort_multipart_upload(Bucket=b, Key=u["Key"], UploadId=u["UploadId"])
            r = s3.delete_bucket(Bucket=b)
            assert r["ResponseMetadata"]["HTTPStatusCode"] == 204, r
            expect_error(lambda b=b: s3.head_bucket(Bucket=b), "404", 404)
        names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
        assert not {bucket, lbucket, cbucket} & set(names), names

    check("delete a non-empty bucket -> BucketNotEmpty; emptied, it is deleted", delete_buckets)

    print(f"s3-clients: {PASSED} passed, {FAILED} failed", flush=True)
    return 0 if FAILED == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
