#!/usr/bin/python3
"""exporter.py: a tiny Prometheus exporter: GET /metrics answers vq_metrics() in the text
exposition format, each family with its HELP and TYPE lines.

    /usr/bin/python3 exporter.py [PORT] [HOST]        (defaults 9464, 127.0.0.1; port 0: any free port)

Connects with the libpq variables, once per scrape (Prometheus scrapes every few seconds at
most). vq_metrics() counts every job when the exporter's role is a member of pg_monitor
(scope="all"), else the jobs of its roles (scope="own"). Scrape
config: static_configs: [{targets: ['HOST:PORT']}]. Prints "listening on http://HOST:PORT/metrics"
when ready; stops on SIGTERM or SIGINT.
"""
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg

HELP = {
    "vq_jobs": "Jobs by queue and state (due, scheduled, running, completed, dead_letter, cancelled).",
    "vq_oldest_due_seconds": "How long the oldest due job of the queue has waited.",
    "vq_completed_last_minute": "Jobs of the queue completed in the last minute.",
    "vq_outbox_rows": "Outbox rows by status.",
}


def exposition(lines):
    """vq_metrics() lines grouped by family, each family after its HELP and TYPE lines."""
    families = {}
    for line in lines:
        families.setdefault(line.split("{", 1)[0].split(" ", 1)[0], []).append(line)
    out = []
    for name, samples in families.items():
        out += [f"# HELP {name} {HELP.get(name, 'vq_job metric.')}", f"# TYPE {name} gauge", *samples]
    return "\n".join(out) + "\n"


class Metrics(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/metrics":
            self.reply(404, "try /metrics\n")
            return
        try:
            with psycopg.connect("", autocommit=True) as conn:
                lines = [line for (line,) in conn.execute("SELECT line FROM vq_metrics() AS line")]
        except psycopg.Error as err:
            # Prometheus marks the target down; the reason is in the body and the exporter's log.
            print(f"exporter.py: scrape failed: {err}", file=sys.stderr, flush=True)
            self.reply(503, f"scrape failed: {err}\n")
            return
        self.reply(200, exposition(lines), "text/plain; version=0.0.4; charset=utf-8")

    def reply(self, status, body, content_type="text/plain"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass   # no line per scrape


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9464
    host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
    server = ThreadingHTTPServer((host, port), Metrics)
    for sig in (signal.SIGTERM, signal.SIGINT):
        # shutdown() waits for serve_forever() to return: call it from another thread.
        signal.signal(sig, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"listening on http://{host}:{server.server_address[1]}/metrics", flush=True)
    server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    main()
