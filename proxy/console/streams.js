// Live data through the proxy: a collection kept current by a Kubernetes
// watch (list, then `?watch=1` from the list's resourceVersion, read as a
// stream of JSON lines), and a followed pod log.

import { ApiError, call } from "./api.js";
import { sleep } from "./dom.js";

async function* lines(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + 1);
      if (line.trim()) yield line;
    }
  }
}

// Calls onChange(Map name -> object) on every change until `signal` aborts.
// A watch the gateway ends (suspension, logout, the server's own timeout) is
// listed again at once, so a refusal is shown within moments; onError
// receives each ApiError and says whether to keep trying.
export async function watchCollection(path, { signal, onChange, onError }) {
  const items = new Map();
  while (!signal.aborted) {
    try {
      const list = await (await call("GET", path, { signal })).json();
      items.clear();
      for (const item of list.items ?? []) items.set(item.metadata.name, item);
      onChange(items);
      const version = encodeURIComponent(list.metadata?.resourceVersion ?? "");
      const watch = await call("GET", `${path}?watch=1&allowWatchBookmarks=true&resourceVersion=${version}`, { signal });
      for await (const line of lines(watch.body)) {
        const event = JSON.parse(line);
        if (event.type === "ADDED" || event.type === "MODIFIED") items.set(event.object.metadata.name, event.object);
        else if (event.type === "DELETED") items.delete(event.object.metadata.name);
        else if (event.type === "ERROR") break; // e.g. 410 Gone: list again
        else continue;
        onChange(items);
      }
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError) {
        if (!onError(error)) return;
        await sleep(2000, signal);
      } else {
        await sleep(200, signal); // the stream broke off: list again now
      }
    }
  }
}

export async function followLog(path, { signal, onText }) {
  const response = await call("GET", path, { signal });
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    onText(decoder.decode(value, { stream: true }));
  }
}
