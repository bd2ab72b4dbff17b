"""Smoke test of the Lambda functions under `cargo lambda watch`, the local Lambda emulator.

The HTTP functions are reached on the API's real paths (the router in Cargo.toml): create,
reserve, replay, read, confirm and release. The event functions are invoked with the fixtures
kept in tests/fixtures: migrate first, then the consumer with an SQS batch and the sweeper with
an EventBridge scheduled event. Each step checks status codes and bodies; the first failure
stops the run with a non-zero exit. Last, the functions' metrics: what each invocation recorded
left as CloudWatch embedded-metric-format documents on its stdout, aggregated per invocation,
and they count exactly the requests made.

Needs Postgres and Redis on their local defaults (scripts/services.sh) and `cargo lambda` on
PATH (scripts/check-deploy.sh runs this with both). Standard library only.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT = int(os.environ.get("SMOKE_PORT", "9100"))
BASE = f"http://127.0.0.1:{PORT}"
RUN = str(int(time.time()))
# Each run gets its own database (test.sh drops fg_test_* ones) and its own Redis key prefix.
DATABASE = f"fg_test_smoke_{RUN}"
PG = os.environ.get("SMOKE_POSTGRES", "postgres://postgres@127.0.0.1:5432")
ENV = {
    "DATABASE_URL": f"{PG}/{DATABASE}",
    "REDIS_URL": os.environ.get("SMOKE_REDIS", "redis://127.0.0.1:6379"),
    "REDIS_KEY_PREFIX": f"smoke-{RUN}:",
    "DATABASE_POOL_SIZE": "1",
    "RUST_LOG": "warn",
}


def log(message):
    print(f"[smoke] {message}", flush=True)


def fail(message):
    log(f"FAILED: {message}")
    sys.exit(1)


def http(method, path, body=None, expect=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + path, data=data, method=method)
    if data is not None:
        request.add_header("content-type", "application/json")
    try:
        # The first request to a function compiles it: allow for that.
        with urllib.request.urlopen(request, timeout=600) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    parsed = json.loads(text) if text else None
    if expect is not None and status != expect:
        fail(f"{method} {path}: expected {expect}, got {status} {text}")
    log(f"{method} {path} -> {status}")
    return status, parsed


def invoke(function, fixture=None, data=None):
    command = ["cargo", "lambda", "invoke", function]
    command += ["--invoke-address", "127.0.0.1", "--invoke-port", str(PORT)]
    if fixture:
        command += ["--data-file", os.path.join(ROOT, "tests", "fixtures", fixture)]
    else:
        command += ["--data-ascii", json.dumps(data or {})]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        fail(f"invoke {function}: {done.stderr.strip()[-2000:]}")
    log(f"invoke {function} -> {done.stdout.strip()}")
    return json.loads(done.stdout)


def wait_for_emulator(watch):
    for _ in range(600):
        if watch.poll() is not None:
            fail("cargo lambda watch exited")
        try:
            urllib.request.urlopen(BASE + "/", timeout=1)
            return
        except urllib.error.HTTPError:
            return  # it answers: an HTTP error is still an answer
        except OSError:
            time.sleep(0.5)
    fail("cargo lambda watch did not start")


def scenario():
    applied = invoke("migrate")["applied"]
    shipped = sorted(f[: -len(".sql")] for f in os.listdir(os.path.join(ROOT, "migrations")))
    if sorted(applied) != shipped:
        fail(f"migrate applied {applied}, the repository ships {shipped}")
    http("GET", "/health", expect=200)
    # Served by the live function, which reads no settings.
    _, live = http("GET", "/health/live", expect=200)
    if live != {"status": "ok"}:
        fail(f"liveness: {live}")

    voucher = {
        "code": "SMOKE-SALE",
        "discountAmount": 10000,
        "minOrderAmount": 0,
        "totalLimit": 2,
        "perUserLimit": 1,
        "startsAt": "2020-01-01T00:00:00Z",
        "endsAt": "2099-01-01T00:00:00Z",
        "flashSale": True,
    }
    http("POST", "/vouchers", voucher, expect=201)
    http("POST", "/vouchers", voucher, expect=409)

    order = {"customerId": 42, "orderId": "smoke-order-1", "orderAmount": 50000}
    _, first = http("POST", "/vouchers/SMOKE-SALE/reservations", order, expect=201)
    _, replay = http("POST", "/vouchers/SMOKE-SALE/reservations", order, expect=201)
    if first != replay or first["status"] != "RESERVED":
        fail(f"replay differs: {first} vs {replay}")
    _, view = http("GET", "/vouchers/SMOKE-SALE", expect=200)
    if view["usedCount"] != 1:
        fail(f"usedCount after a reserve and its replay: {view}")
    _, read = http("GET", "/vouchers/SMOKE-SALE/reservations/smoke-order-1", expect=200)
    if read["status"] != "RESERVED":
        fail(f"reservation read back: {read}")

    _, confirmed = http(
        "POST", "/vouchers/SMOKE-SALE/reservations/smoke-order-1/confirm", expect=200
    )
    if confirmed["status"] != "CONFIRMED":
        fail(f"confirm: {confirmed}")
    http("DELETE", "/vouchers/SMOKE-SALE/reservations/smoke-order-1", expect=204)
    http("DELETE", "/vouchers/SMOKE-SALE/reservations/smoke-order-1", expect=204)
    _, view = http("GET", "/vouchers/SMOKE-SALE", expect=200)
    if view["usedCount"] != 0:
        fail(f"usedCount after release: {view}")
    status, bad = http("POST", "/vouchers/SMOKE-SALE/reservations", {"customerId": "x"})
    if status != 400 or bad.get("error") != "INVALID_REQUEST":
        fail(f"bad input: {status} {bad}")

    # The consumer writes the voucher-reserved event of the SQS fixture.
    events_voucher = dict(voucher, code="SMOKE-EVENTS", flashSale=False, totalLimit=5)
    http("POST", "/vouchers", events_voucher, expect=201)
    answer = invoke("consumer", fixture="sqs-voucher-reserved.json")
    if answer.get("batchItemFailures"):
        fail(f"consumer reported failures: {answer}")
    _, landed = http("GET", "/vouchers/SMOKE-EVENTS/reservations/smoke-event-1", expect=200)
    if landed["status"] != "RESERVED" or landed["customerId"] != 7:
        fail(f"event did not land: {landed}")

    # The sweeper releases a reservation whose TTL has passed.
    short = dict(voucher, code="SMOKE-TTL", flashSale=False, reservationTtlSeconds=1)
    http("POST", "/vouchers", short, expect=201)
    http("POST", "/vouchers/SMOKE-TTL/reservations", dict(order, orderId="smoke-ttl-1"), expect=201)
    time.sleep(2.5)
    report = invoke("sweeper", fixture="eventbridge-schedule.json")
    _, swept = http("GET", "/vouchers/SMOKE-TTL/reservations/smoke-ttl-1", expect=200)
    if swept["status"] != "RELEASED":
        fail(f"sweeper did not expire the reservation: {report} {swept}")


def emf_documents(path):
    """The embedded-metric-format documents the functions wrote, from the emulator's output."""
    documents = []
    with open(path, encoding="utf-8", errors="replace") as output:
        for line in output:
            start = line.find('{"_aws"')
            if start < 0:
                continue
            try:
                documents.append(json.loads(line[start:]))
            except json.JSONDecodeError:
                continue
    return documents


def check_metrics(path):
    documents = emf_documents(path)
    if not documents:
        fail("no embedded-metric-format document in the functions' output")
    reserve = "POST /vouchers/{code}/reservations"

    def total(name, **dimensions):
        return sum(
            d.get(name, 0)
            for d in documents
            if name in d and all(d.get(k) == v for k, v in dimensions.items())
        )

    # The reserve function: two RESERVED (the first and its replay, one invocation each) and
    # one INVALID_REQUEST on SMOKE-SALE, one RESERVED on SMOKE-TTL.
    got = {
        "RESERVED": total("flashgate_requests_total", function="reserve", route=reserve, outcome="RESERVED"),
        "INVALID_REQUEST": total(
            "flashgate_requests_total", function="reserve", route=reserve, outcome="INVALID_REQUEST"
        ),
    }
    if got != {"RESERVED": 3, "INVALID_REQUEST": 1}:
        fail(f"reserve's request counts in its metrics: {got}")
    landed = total("flashgate_events_landed_total", function="consumer", outcome="applied")
    if landed != 1:
        fail(f"the consumer's landed events in its metrics: {landed}")
    expired = total("flashgate_sweep_items_total", function="sweeper", kind="expired")
    if expired < 1:
        fail(f"the sweeper's expired reservations in its metrics: {expired}")
    for d in documents:
        spec = d["_aws"]["CloudWatchMetrics"][0]
        if spec["Namespace"] != "Flashgate" or "function" not in spec["Dimensions"][0]:
            fail(f"a metric document outside the Flashgate namespace or without its function: {d}")
        if not d.get("requestId"):
            fail(f"a metric document without its invocation's requestId: {d}")
    log(f"metrics: {len(documents)} embedded-metric-format documents, counts as sent")


def main():
    command = ["cargo", "lambda", "watch", "--ignore-changes"]
    command += ["--invoke-address", "127.0.0.1", "--invoke-port", str(PORT)]
    for name, value in ENV.items():
        command += ["--env-var", f"{name}={value}"]
    log(f"starting cargo lambda watch on {BASE} (database {DATABASE})")
    # The functions' stdout (their logs and metrics) comes out of the emulator's: kept to read
    # the metrics back, and shown on failure.
    output_path = os.path.join(ROOT, ".flashgate", f"smoke-watch-{RUN}.log")
    os.makedirs(os.path.dirname(output_path), exist_ok=True)
    output = open(output_path, "w", encoding="utf-8")
    watch = subprocess.Popen(
        command, cwd=ROOT, start_new_session=True, stdout=output, stderr=subprocess.STDOUT
    )
    passed = False
    try:
        wait_for_emulator(watch)
        scenario()
        # The last invocation's documents are written as it ends: give the pipe a moment.
        time.sleep(1)
        output.flush()
        check_metrics(output_path)
        log("all steps passed")
        passed = True
    finally:
        os.killpg(watch.pid, signal.SIGTERM)
        try:
            watch.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(watch.pid, signal.SIGKILL)
        output.close()
        if not passed:
            with open(output_path, encoding="utf-8", errors="replace") as shown:
                sys.stderr.write(shown.read()[-20000:])
        os.remove(output_path)


if __name__ == "__main__":
    main()
