// The console talks to the gateway exactly as any web UI would: the session
// cookie rides along, and every write carries X-CSRF-Token, read from the
// gw_csrf cookie. Failures become ApiError with a message a person can act
// on; the gateway's JSON is never shown as such.

export class ApiError extends Error {
  constructor(status, code, message, retryAfter) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

export function csrfToken() {
  const found = document.cookie.match(/(?:^|;\s*)gw_csrf=([^;]*)/);
  return found ? decodeURIComponent(found[1]) : "";
}

const SAFE = new Set(["GET", "HEAD"]);

export async function call(method, path, { body, signal, contentType = "application/json" } = {}) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = contentType;
  if (!SAFE.has(method)) headers["X-CSRF-Token"] = csrfToken();
  let response;
  try {
    response = await fetch(path, {
      method, headers, signal, credentials: "same-origin", cache: "no-store",
      body: body === undefined ? undefined : (typeof body === "string" ? body : JSON.stringify(body)),
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "unreachable", "The gateway cannot be reached. Check the connection and try again.", null);
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

export async function json(method, path, options) {
  const response = await call(method, path, options);
  return response.status === 204 ? null : response.json();
}

async function errorOf(response) {
  let code = "";
  let message = "";
  try {
    const body = await response.json();
    code = String(body?.error?.code ?? body?.reason ?? "");
    message = String(body?.error?.message ?? body?.message ?? "");
  } catch {
    // not JSON: the status alone speaks
  }
  const header = response.headers.get("Retry-After");
  const retryAfter = header !== null && /^\d+$/.test(header) ? Number(header) : null;
  return new ApiError(response.status, code, explain(response.status, code, message, retryAfter), retryAfter);
}

// What a person reads for a refusal: what happened and what to do next.
export function explain(status, code, message, retryAfter) {
  if (code === "workspace_suspended") {
    return "This workspace is suspended by an administrator: its pods and credentials are on hold. Ask an administrator to resume it.";
  }
  if (status === 401 && code === "invalid_credentials") return "Wrong email or password.";
  if (status === 401) return "Your session has ended. Sign in again.";
  if (status === 429) {
    const when = retryAfter === null ? "in a moment" : `in ${retryAfter} second${retryAfter === 1 ? "" : "s"}`;
    return `Too many requests. Try again ${when}.`;
  }
  if (status === 502 || status === 503 || status === 504) {
    return `${sentence(message || "the cluster is unavailable")} Try again in a moment.`;
  }
  return message ? sentence(message) : `The request failed (HTTP ${status}).`;
}

// The gateway's and the API server's messages start small and end bare.
function sentence(text) {
  const trimmed = text.trim();
  const capital = trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
  return /[.!?]$/.test(capital) ? capital : `${capital}.`;
}
