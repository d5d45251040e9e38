#!/usr/bin/env python3
"""The cluster console in headless Chromium, driven through the DevTools protocol.

Seeds a fresh database (psql, the SQL API), starts `ax-pg serve` with a token, opens the page
with the token in the fragment, and then, as an operator would: filters the task list, opens a
task, clicks Cancel (the confirm dialog accepted), opens a dead letter and clicks Replay, runs a
bulk cancel on a filter, and checks each outcome in the database. Tasks, dead letters and a node
whose kind, payload, error, tags and name hold markup and quotes must render as those characters
and execute nothing. The page must not scroll sideways at 1280x800 nor at 390 px wide, and the
token must be gone from the address. With --screenshot PATH it saves the page at 1280x800.

Python's standard library only: a minimal WebSocket client (RFC 6455, client side) speaks the
DevTools protocol. Needs AX_PG_CONNINFO (scripts/pg-server.sh; exit 77 without it), psql and
Debian's chromium (scripts/deps.sh; exit 77 with AX_SKIP_CHROMIUM=1 when it is missing).

Usage: console_browser.py --ax-pg PATH/TO/ax-pg [--screenshot docs/console.png]
"""

import argparse
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

TOKEN = "browser-test-token-0123456789abcdef"
DB = "ax_console_browser"

HOSTILE_KIND = '<script>window.__pwned="kind"</script>'
HOSTILE_PAYLOAD = '"><img src=x onerror="window.__pwned=\'payload\'">\'quoted\''
HOSTILE_ERROR = "<img src=x onerror=window.__pwned='error'> & \"quotes\""
HOSTILE_TAG = "<svg/onload=window.__pwned='tag'>"
HOSTILE_NODE = "<b onmouseover=window.__pwned='node'>node</b>"
HOSTILE_GROUP = "<img src=x onerror=window.__pwned='group'>\"grp\""
HOSTILE_KEY = "<iframe onload=window.__pwned='key'>"
HOSTILE_FLOW = "<script>window.__pwned='flow'</script>&amp;"


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg, flush=True)


# --- the database, through psql


class Psql:
    def __init__(self, conninfo):
        self.conninfo = conninfo

    def run(self, sql, db=None):
        ci = self.conninfo + ((" dbname=" + db) if db else "")
        out = subprocess.run(["psql", ci, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1",
                              "-c", sql], capture_output=True, text=True)
        if out.returncode != 0:
            fail("psql: %s\n%s" % (sql[:200], out.stderr))
        return out.stdout.strip()


def q(s):
    """A SQL string literal."""
    return "'" + s.replace("'", "''") + "'"


# --- a minimal WebSocket client and the DevTools protocol


class WebSocket:
    def __init__(self, url):
        assert url.startswith("ws://")
        rest = url[5:]
        hostport, path = rest.split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        req = ("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key))
        self.sock.sendall(req.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                fail("websocket handshake: connection closed")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            fail("websocket handshake refused: %r" % head[:200])

    def _read(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                fail("websocket closed")
            buf += chunk
        return buf

    def send(self, text, opcode=1):
        data = text.encode() if isinstance(text, str) else text
        head = bytes([0x80 | opcode])
        n = len(data)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if opcode == 8:
                fail("websocket closed by the browser")
            if opcode == 9:
                self.send(data, opcode=10)
                continue
            if opcode in (0, 1, 2):
                message += data
                if b0 & 0x80:
                    return message.decode()


class DevTools:
    def __init__(self, ws_url):
        self.ws = WebSocket(ws_url)
        self.next_id = 0
        self.dialogs = []
        self.console_errors = []

    def _event(self, m):
        method = m.get("method")
        if method == "Page.javascriptDialogOpening":
            # The page's confirm(): record its text, accept it (the operator clicks OK).
            self.dialogs.append(m["params"]["message"])
            self.send_only("Page.handleJavaScriptDialog", {"accept": True})
        elif method == "Runtime.exceptionThrown":
            self.console_errors.append(json.dumps(m["params"])[:500])

    def send_only(self, method, params=None):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        return self.next_id

    def call(self, method, params=None):
        want = self.send_only(method, params)
        while True:
            m = json.loads(self.ws.recv())
            if "id" not in m:
                self._event(m)
                continue
            if m["id"] != want:
                continue
            if "error" in m:
                fail("%s: %s" % (method, m["error"]))
            return m["result"]

    def js(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            fail("script error in %s: %s" % (expr[:120], json.dumps(r["exceptionDetails"])[:500]))
        return r["result"].get("value")

    def wait(self, expr, what, limit=20.0):
        """Polls `expr` until truthy; fails naming `what` after `limit` s (a hang guard)."""
        until = time.time() + limit
        while time.time() < until:
            v = self.js(expr)
            if v:
                return v
            time.sleep(0.1)
        fail("timed out waiting for " + what)


# --- the test


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def seed(db, p):
    """The tasks the browser acts on, hostile ones, a node, and an hour of history for charts."""
    ids = {}

    def enqueue(kind, payload="", extra=""):
        return int(p.run("SELECT ax.enqueue(kind => %s, payload => convert_to(%s, 'UTF8')%s)"
                         % (q(kind), q(payload), extra), db))

    def dead(kind, payload, error):
        i = enqueue(kind, payload)
        p.run("SELECT ax.dead_letter(%d, %s, 'attempts exhausted')" % (i, q(error)), db)
        return i

    for n in range(6):
        enqueue("email.send", json.dumps({"to": "user%d@example.com" % n, "template": "welcome"}))
    for n in range(3):
        enqueue("report.build", '{"month": "2026-11"}', ", run_at => now() + interval '2 hours'")
    ids["cancel"] = enqueue("browser.cancel", '{"order": 1234}')
    ids["replay"] = dead("browser.replay", '{"invoice": 77}', "gateway timeout after 30 s")
    ids["bulk"] = [enqueue("browser.bulk", "b%d" % n) for n in range(3)]
    ids["hostile"] = dead(HOSTILE_KIND, HOSTILE_PAYLOAD, HOSTILE_ERROR)
    ids["hostile_tag"] = enqueue("image.resize", HOSTILE_PAYLOAD,
                                 ", tags => ARRAY[%s]" % q(HOSTILE_TAG))
    dead("image.resize", "\u00e9t\u00e9 \u2014 caf\u00e9", "decoder: unsupported format")
    # Two nodes, one holding a few tasks, one with a hostile name.
    n1 = int(p.run("INSERT INTO ax.nodes (name, kinds, tags, host, pid, lease_until) VALUES "
                   "('worker-a', '{email.send,image.resize}', '{gpu}', 'host-a', 4242, now() + "
                   "interval '25 s') RETURNING id", db))
    p.run("INSERT INTO ax.nodes (name, kinds, tags, host, pid, lease_until) VALUES (%s, "
          "'{report.build}', ARRAY[%s], 'host-b', 777, now() + interval '20 s')"
          % (q(HOSTILE_NODE), q(HOSTILE_TAG)), db)
    p.run("UPDATE ax.tasks SET node_id = %d WHERE id IN (SELECT id FROM ax.tasks WHERE kind = "
          "'email.send' ORDER BY id LIMIT 2)" % n1, db)
    # An hour of finished tasks (IDs far above the live ones) and a few failures, so the chart
    # has a shape.
    p.run("INSERT INTO ax.history (id, kind, priority, state, attempts, enqueued_at, finished_at) "
          "SELECT 1000000 + row_number() OVER (), 'email.send', 1, CASE WHEN g % 17 = 0 THEN 2 "
          "ELSE 1 END, 1, now() - interval '61 minutes', now() - m * interval '1 minute' - "
          "interval '5 seconds' FROM generate_series(0, 59) m, LATERAL generate_series(1, 30 + "
          "(m * 37 % 19) + (m % 7) * 2) g", db)
    for n in range(6):
        dead("email.send", '{"to": "bounce%d@example.com"}' % n, "SMTP 550: mailbox unavailable")
    p.run("UPDATE ax.dead_letters SET failed_at = now() - (id % 7) * interval '8 minutes' "
          "WHERE kind = 'email.send'", db)
    p.run("SELECT ax.pause('kind', 'report.build')", db)
    # A limited group, a key weight and an unfinished flow, all with hostile names (the Limits and
    # Flows panels).
    p.run("SELECT ax.set_limit(%s, 2, false, 10, 1000)" % q(HOSTILE_GROUP), db)
    p.run("SELECT ax.set_key_weight(%s, %s, 3)" % (q(HOSTILE_GROUP), q(HOSTILE_KEY)), db)
    flow = [{"name": "fetch", "kind": "flow.step"},
            {"name": "merge", "kind": "flow.step", "depends_on": ["fetch"]}]
    p.run("SELECT min(flow_id) FROM ax.enqueue_flow(%s, %s::jsonb)"
          % (q(HOSTILE_FLOW), q(json.dumps(flow))), db)
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ax-pg", required=True)
    ap.add_argument("--screenshot", default="")
    args = ap.parse_args()

    base = os.environ.get("AX_PG_CONNINFO", "")
    if not base:
        print("SKIPPED: AX_PG_CONNINFO is not set (run under scripts/pg-server.sh)")
        return 77
    chromium = shutil.which("chromium") or ("/usr/bin/chromium"
                                            if os.path.exists("/usr/bin/chromium") else None)
    if not chromium:
        if os.environ.get("AX_SKIP_CHROMIUM") == "1":
            print("SKIPPED: chromium not found and AX_SKIP_CHROMIUM=1")
            return 77
        fail("chromium is not installed: run scripts/deps.sh (or set AX_SKIP_CHROMIUM=1)")
    if not shutil.which("psql"):
        fail("psql is not installed: run scripts/deps.sh (Debian postgresql)")

    p = Psql(base)
    p.run("DROP DATABASE IF EXISTS %s WITH (FORCE)" % DB)
    p.run("CREATE DATABASE %s" % DB)
    conninfo = base + " dbname=" + DB
    subprocess.run([args.ax_pg, "--db", conninfo, "migrate"], check=True, capture_output=True)
    ids = seed(DB, p)
    for name, cron, kind in (("nightly-report", "0 3 * * *", "report.build"),
                             ("digest", "*/15 * * * *", "email.send")):
        subprocess.run([args.ax_pg, "--db", conninfo, "schedules", "add", name, cron, kind],
                       check=True, capture_output=True)

    port = free_port()
    work = tempfile.mkdtemp(prefix="ax-console-browser.")
    server = subprocess.Popen([args.ax_pg, "--db", conninfo, "serve", "--port", str(port)],
                              env=dict(os.environ, AX_CONSOLE_TOKEN=TOKEN),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    browser = None
    try:
        line = server.stdout.readline()
        if "console on" not in line:
            fail("ax-pg serve did not start: " + line + server.stdout.read())
        profile = os.path.join(work, "profile")
        browser = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--hide-scrollbars", "--remote-debugging-port=0",
             "--user-data-dir=" + profile, "--window-size=1280,800", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "chromium.log"), "w"))
        active = os.path.join(profile, "DevToolsActivePort")
        until = time.time() + 30
        while not (os.path.exists(active) and open(active).read().count("\n") >= 1):
            if time.time() > until or browser.poll() is not None:
                fail("chromium did not start its DevTools endpoint:\n" +
                     open(os.path.join(work, "chromium.log")).read()[-2000:])
            time.sleep(0.1)
        devtools_port = int(open(active).read().split("\n")[0])
        targets = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % devtools_port))
        page = next(t for t in targets if t.get("type") == "page")
        dt = DevTools(page["webSocketDebuggerUrl"])
        dt.call("Page.enable")
        dt.call("Runtime.enable")
        dt.call("Emulation.setDeviceMetricsOverride",
                {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
        url = "http://127.0.0.1:%d/#token=%s" % (port, TOKEN)
        dt.call("Page.navigate", {"url": url})
        dt.wait("document.readyState === 'complete' && document.querySelectorAll('#tasks "
                "tr.row').length > 0 && document.querySelectorAll('#kinds tr').length > 1",
                "the page to load its overview and task list")

        # The token left the address bar at once; the page still has it (in this tab only).
        href = dt.js("location.href")
        check("token" not in href and TOKEN not in href, "the token is stripped from the URL (%s)" % href)
        check(dt.js("sessionStorage.getItem('ax-console-token')") == TOKEN,
              "the page keeps the token for this tab")
        check(dt.js("document.getElementById('mode').textContent").startswith("actions enabled"),
              "actions are enabled with a token")

        # Hostile strings: shown literally, nothing executed, no element made from them.
        dt.wait("document.getElementById('nodes').textContent.includes(%s)" % json.dumps(HOSTILE_NODE),
                "the hostile node name in the nodes table")
        dt.wait("document.getElementById('limits').textContent.includes(%s) && "
                "document.getElementById('flows').textContent.includes(%s)"
                % (json.dumps(HOSTILE_GROUP), json.dumps(HOSTILE_FLOW)),
                "the hostile group and flow in the Limits and Flows panels")
        text = dt.js("document.body.textContent")
        for s, what in ((HOSTILE_KIND, "kind"), (HOSTILE_NODE, "node name"), (HOSTILE_TAG, "tag")):
            check(s in text, "the hostile %s shows as text" % what)
        check(HOSTILE_KEY in dt.js("document.getElementById('weights').textContent"),
              "the hostile key shows as text in the key weights")
        limits_row = dt.js("Array.from(document.querySelectorAll('#limits tbody td')).map("
                           "c => c.textContent)")
        check(limits_row[:6] == [HOSTILE_GROUP, "running \u2264 2, rate 10 / 1000 ms", "0", "0", "0", "-"],
              "the limits row: group, limits, running, queued, keys, next slot (%s)" % limits_row)
        flows_row = dt.js("Array.from(document.querySelectorAll('#flows tbody td')).map("
                          "c => c.textContent)")
        check(flows_row[1] == HOSTILE_FLOW and flows_row[3] == " 0/2" and flows_row[4] == "1"
              and flows_row[5] == "1", "the flow row: name, progress, waiting, pending (%s)" % flows_row)

        def set_filter(**f):
            fields = {"state": "", "kind": "", "tag": "", "lane": "", "key": "", "older": "",
                      "newer": ""}
            fields.update(f)
            js = "".join("document.getElementById('f-%s').value = %s;" % (k, json.dumps(v))
                         for k, v in fields.items())
            # Empty the old list first, so a wait cannot be satisfied by the previous page.
            dt.js(js + "document.getElementById('tasks').textContent = '';"
                  "document.getElementById('f-search').click(); true")

        def rows():
            return dt.js("Array.from(document.querySelectorAll('#tasks tr.row')).map("
                         "r => [r.dataset.id, r.cells[1].textContent, r.cells[2].textContent])")

        def open_task(task_id):
            dt.js("document.querySelector('#tasks tr.row[data-id=\"%d\"]').click(); true" % task_id)
            dt.wait("document.getElementById('task-title').textContent === 'Task #%d'" % task_id,
                    "task #%d to open" % task_id)

        set_filter(kind=HOSTILE_KIND)
        dt.wait("document.querySelectorAll('#tasks tr.row').length === 1 && "
                "document.querySelector('#tasks tr.row').dataset.id === '%d'" % ids["hostile"],
                "the filter by the hostile kind")
        open_task(ids["hostile"])
        dt.wait("document.getElementById('payload') !== null", "the hostile task's payload")
        check(dt.js("document.getElementById('payload').textContent") == HOSTILE_PAYLOAD,
              "the hostile payload shows literally")
        check(dt.js("document.getElementById('errors').textContent") == HOSTILE_ERROR,
              "the hostile error shows literally")
        set_filter(tag=HOSTILE_TAG)
        dt.wait("document.querySelectorAll('#tasks tr.row').length === 1", "the filter by the hostile tag")
        check(HOSTILE_TAG in dt.js("document.getElementById('tasks').textContent"),
              "the hostile tag shows literally in the list")
        time.sleep(0.3)  # any injected handler would have run by now
        check(dt.js("typeof window.__pwned") == "undefined", "no hostile string executed")
        check(dt.js("document.querySelectorAll('img, svg, iframe, object, embed, "
                    "[onerror], [onload], [onmouseover]').length") == 0,
              "no element was made from a hostile string")
        check(dt.js("document.querySelectorAll('script').length") == 1,
              "the page's own script is the only one")

        # Filter, open a task, cancel it (the confirm dialog accepted), then check the database.
        set_filter(kind="browser.cancel")
        dt.wait("document.querySelectorAll('#tasks tr.row').length === 1", "the filter by kind")
        check(rows() == [[str(ids["cancel"]), "pending", "browser.cancel"]],
              "the filter shows the one task of that kind")
        open_task(ids["cancel"])
        dialogs = len(dt.dialogs)
        dt.js("document.getElementById('act-cancel').click(); true")
        dt.wait("document.getElementById('msg').textContent === '#%d: cancelled'" % ids["cancel"],
                "the cancel to be reported")
        check(len(dt.dialogs) == dialogs + 1 and "#%d" % ids["cancel"] in dt.dialogs[-1],
              "the cancel was confirmed in a dialog (%s)" % dt.dialogs[-1:])
        check(p.run("SELECT state FROM ax.history WHERE id = %d" % ids["cancel"], DB) == "2",
              "the database has task #%d cancelled" % ids["cancel"])

        # A dead letter: filter by state and kind, open it, replay it.
        set_filter(state="dead_lettered", kind="browser.replay")
        dt.wait("document.querySelectorAll('#tasks tr.row').length === 1", "the dead letter filter")
        open_task(ids["replay"])
        dt.js("document.getElementById('act-replay').click(); true")
        dt.wait("document.getElementById('msg').textContent === '#%d: replayed'" % ids["replay"],
                "the replay to be reported")
        check(p.run("SELECT count(*) FROM ax.tasks WHERE id = %d" % ids["replay"], DB) == "1" and
              p.run("SELECT count(*) FROM ax.dead_letters WHERE id = %d" % ids["replay"], DB) == "0",
              "the database has task #%d live again" % ids["replay"])

        # A bulk cancel on a filter, confirmed and reported with counts.
        set_filter(kind="browser.bulk")
        dt.wait("document.querySelectorAll('#tasks tr.row').length === 3", "the bulk filter")
        dt.js("document.getElementById('bulk-action').value = 'cancel';"
              "document.getElementById('bulk').click(); true")
        dt.wait("document.getElementById('msg').textContent.startsWith('bulk cancel: 3 matched')",
                "the bulk cancel to be reported")
        check("browser.bulk" in dt.dialogs[-1], "the bulk action was confirmed (%s)" % dt.dialogs[-1])
        check(p.run("SELECT count(*) FROM ax.history WHERE kind = 'browser.bulk' AND state = 2",
                    DB) == "3", "the database has the 3 bulk tasks cancelled")

        # Layout: no sideways scroll at 1280x800, then the screenshot of the overview. The hostile
        # rows have done their part: removed, so the screenshot shows an ordinary cluster (the
        # page reloads from this tab's stored token).
        p.run("DELETE FROM ax.nodes WHERE name = %s" % q(HOSTILE_NODE), DB)
        p.run("DELETE FROM ax.dead_letters WHERE id = %d" % ids["hostile"], DB)
        p.run("DELETE FROM ax.tasks WHERE id = %d" % ids["hostile_tag"], DB)
        p.run("SELECT ax.clear_limit(%s)" % q(HOSTILE_GROUP), DB)
        p.run("SELECT ax.set_key_weight(%s, %s, 1)" % (q(HOSTILE_GROUP), q(HOSTILE_KEY)), DB)
        p.run("UPDATE ax.flows SET name = 'order-7' WHERE name = %s" % q(HOSTILE_FLOW), DB)
        dt.call("Page.reload")
        dt.wait("document.readyState === 'complete' && document.querySelectorAll('#tasks "
                "tr.row').length > 5 && document.querySelectorAll('#kinds tr').length > 1",
                "the page to reload")
        check(dt.js("document.getElementById('mode').textContent").startswith("actions enabled"),
              "the token survives a reload of the tab")
        dt.js("window.scrollTo(0, 0); true")
        time.sleep(0.3)
        check(dt.js("document.documentElement.scrollWidth") <= 1280, "no sideways scroll at 1280 px")
        if args.screenshot:
            shot = dt.call("Page.captureScreenshot", {"format": "png"})
            with open(args.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            print("screenshot: " + args.screenshot)
        dt.call("Emulation.setDeviceMetricsOverride",
                {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
        open_task(ids["replay"])
        time.sleep(0.5)
        width = dt.js("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")
        check(width <= 390, "no sideways scroll at 390 px wide (scrollWidth %s)" % width)
        check(not dt.console_errors, "no script error on the page (%s)" % dt.console_errors[:2])
        print("PASS: console in headless Chromium")
        return 0
    finally:
        if browser:
            browser.terminate()
            try:
                browser.wait(10)
            except subprocess.TimeoutExpired:
                browser.kill()
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
