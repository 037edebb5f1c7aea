"""The express lane: an ordinary proxied GET, answered beneath aiohttp's server.

Why: aiohttp's server costs more per request than the whole of Go's reverse
proxy on the same machine (a Request, a StreamWriter, a task, the router,
the middleware and the response objects for every GET; bench/HISTORY.md,
"The express lane"). The commonest request of all, kubectl's or a client
library's GET with a bearer token, needs none of it once the gate's
decision is cached.

Which requests take it: a complete request head `GET /k8s/... HTTP/1.1`
whose header section is plain (each line a token name, a colon and a value
of visible characters, spaces and tabs; no more than aiohttp's parser
reads, none of its singletons twice, a Host), with exactly one
`Authorization: Bearer`, no body, and none of the headers that ask for
more than a forward (Connection, Expect, Origin); for which the gate says
yes from cached state alone (`Gate.express_ticket`: the same checks, in the
same order) and the tenant's token is cached. The express lane never
refuses a request: it lends it to aiohttp and the gate's full path (`Lend`:
its head and its Content-Length body, exactly as they came), and takes the
connection back once aiohttp has answered and keeps the connection open.
A head it cannot read as aiohttp would, a chunked body, an upgrade or a
CONNECT leave the connection to aiohttp for good (`admit` returns None).

What a request gets here is what the full path gives it: the same header
hygiene (proxy.passthrough.headers; header lines otherwise go up byte for
byte), the same upstream and tenant-token rules (a 401 drops the token and
the GET is sent once more with a fresh one), failures mapped in the same
place (proxy.passthrough.upstream.send_failed) and rendered in the same
shape (proxy.http.errors), the same response headers (proxy.http.answer_headers), the
same metrics, and the same drain (counted in flight; a request cut at the
end of the drain before its answer began answers 503 `shutting_down`).
"""

from proxy.passthrough.express.answering import Admitted, Connection, ExpressLane
from proxy.passthrough.express.heads import INCOMPLETE, MAX_HEAD_BYTES, Lend, read_head

__all__ = ["INCOMPLETE", "MAX_HEAD_BYTES", "Admitted", "Connection", "ExpressLane", "Lend", "read_head"]
