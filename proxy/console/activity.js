// What people did: a workspace's activity timeline (the gateway's audit rows
// and the API server's own events of the kubeconfigs it issued and of the
// requests its proxy made, merged by the gateway, each action once), everyone's or one person's; and, for the gateway's admins,
// the audit log. Both newest first, a page at a time: Older appends the next.

import { json } from "./api.js";
import { h, table } from "./dom.js";
import { emailsOf, when } from "./credentials.js";
import { mayManage, memberPath } from "./members.js";

export const PAGE_SIZES = [10, 25, 50, 100];

// What a timeline row did, in a few words: the gateway's action, or the
// API server's verb and the object it was done to.
export function whatWasDone(item) {
  if (item.source === "gateway") return [item.action, item.verb].filter(Boolean).join(" ");
  const resource = [item.resource, item.subresource].filter(Boolean).join("/");
  return [item.verb, resource, item.name].filter(Boolean).join(" ");
}

// How a timeline row came, for a person to read (the item's `via`).
const VIA = { kubeconfig: "kubeconfig", token: "token", proxy: "through the gateway", gateway: "gateway API" };
export function cameVia(item) {
  return VIA[item.via] ?? "";
}

// Who, for a person to read: their email where known, "unattributed" for a
// credential the gateway did not issue.
export function personOf(userId, emails, me) {
  if (!userId) return "unattributed";
  if (userId === me?.id) return `${me.email} (you)`;
  return emails.get(userId) ?? userId;
}

// The audit route's `before` for the page after the one ending with `row`.
export function auditBefore(row) {
  return `${row.created_at},${row.id}`;
}

// A table that grows a page at a time. load(cursor) -> { rows: [<tr>], next };
// returns the table's box and a function that starts it over.
function paged(caption, headings, load, { signal, busy }) {
  const box = h("div", {});
  const older = h("button", { type: "button" }, "Older");
  const status = h("p", { class: "muted", role: "status" });
  let body = null;
  let cursor = null;
  let generation = 0;  // a page asked for before the filters changed is dropped
  const more = async () => {
    const asked = generation;
    const { rows, next } = await load(cursor, signal);
    if (asked !== generation) return;
    body.append(...rows);
    cursor = next;
    older.hidden = !next;
    status.textContent = next ? "" : "No older rows.";
  };
  older.addEventListener("click", busy(older, more));
  const restart = async () => {
    const asked = ++generation;
    const first = await load(null, signal);
    if (asked !== generation) return;
    const made = table(caption, headings, first.rows);
    body = made.querySelector("tbody");
    cursor = first.next;
    older.hidden = !cursor;
    status.textContent = cursor || !first.rows.length ? "" : "No older rows.";
    box.replaceChildren(made, h("div", { class: "row" }, older, status));
  };
  return { box, restart };
}

function pageSize(id, value) {
  return h("select", { id }, PAGE_SIZES.map((n) => h("option", { value: String(n), text: String(n), selected: n === value })));
}

// ctx: { workspace, me, signal, busy(button, work) }
export async function activityView(root, ctx) {
  const { workspace, me, signal, busy } = ctx;
  const manage = Boolean(workspace) && mayManage(workspace, me);
  const roster = workspace ? await json("GET", memberPath(workspace.id), { signal }).catch(() => null) : null;
  const emails = emailsOf(roster);
  const person = h("select", { id: "activity-person" },
    manage ? h("option", { value: "", text: "Everyone" }) : null,
    h("option", { value: me.id, text: `${me.email} (you)` }),
    manage ? [...emails].filter(([id]) => id !== me.id).map(([id, email]) => h("option", { value: id, text: email })) : null);
  const size = pageSize("activity-size", 50);
  root.append(h("p", { text: workspace
    ? `What was done in ${workspace.namespace}: through the gateway, and straight at the API server with the kubeconfigs ` +
      "it issued (a few seconds late). " + (manage ? "As its admin you see everyone's." : "You see your own.")
    : "What you did through the gateway." }),
  h("div", { class: "filters" }, h("label", { for: "activity-person", text: "Person" }), person,
    h("label", { for: "activity-size", text: "Per page" }), size));
  const load = async (cursor) => {
    const query = new URLSearchParams({ limit: size.value });
    if (workspace) query.set("workspace_id", workspace.id);
    if (person.value) query.set("user_id", person.value);
    if (cursor) query.set("cursor", cursor);
    const page = await json("GET", `/api/v1/activity?${query}`, { signal });
    return {
      next: page.next,
      rows: page.items.map((item) => h("tr", {},
        h("td", { text: when(item.time) }), h("td", { text: item.source }), h("td", { text: cameVia(item) }),
        h("td", { class: item.user_id ? null : "muted", text: personOf(item.user_id, emails, me) }),
        h("td", { text: whatWasDone(item) }), h("td", { text: item.namespace ?? "" }),
        h("td", { text: item.code === null || item.code === undefined ? "" : String(item.code) }))),
    };
  };
  const timeline = paged("Activity, newest first", ["Time", "Source", "Via", "Person", "What", "Namespace", "Code"], load, { signal, busy });
  root.append(timeline.box);
  person.addEventListener("change", busy(person, timeline.restart));
  size.addEventListener("change", busy(size, timeline.restart));
  await timeline.restart();
}

export const ACTIONS = ["Register", "Login", "Logout", "ApproveDevice", "InitWorkspace", "IssueKubeconfig", "RevokeCredential",
  "AddMember", "ChangeRole", "RemoveMember", "SuspendWorkspace", "ResumeWorkspace", "ReconcileWorkspace", "SuspendUser",
  "ResumeUser", "ProxyWrite", "ProxyExec"];

// ctx: { signal, busy(button, work) }
export async function auditView(root, ctx) {
  const { signal, busy } = ctx;
  const workspaces = await json("GET", "/api/v1/workspaces?all=true", { signal });
  const namespaces = new Map(workspaces.map((w) => [w.id, w.namespace]));
  const email = h("input", { id: "audit-email", type: "email", placeholder: "anyone", maxlength: 254, autocomplete: "off" });
  const workspace = h("select", { id: "audit-workspace" }, h("option", { value: "", text: "any" }),
    [...workspaces].sort((a, b) => a.namespace.localeCompare(b.namespace)).map((w) => h("option", { value: w.id, text: w.namespace })));
  const action = h("select", { id: "audit-action" }, h("option", { value: "", text: "any" }),
    ACTIONS.map((a) => h("option", { value: a, text: a })));
  const size = pageSize("audit-size", 50);
  const apply = h("button", { type: "submit", class: "primary" }, "Filter");
  const field = (id, label, input) => [h("label", { for: id, text: label }), input];
  const form = h("form", { class: "filters" }, field("audit-email", "Email", email), field("audit-workspace", "Namespace", workspace),
    field("audit-action", "Action", action), field("audit-size", "Per page", size), apply);
  const load = async (cursor) => {
    const limit = Number(size.value);
    const query = new URLSearchParams({ limit: String(limit + 1) });  // one more says whether there is an older page
    if (email.value.trim()) query.set("email", email.value.trim());
    if (workspace.value) query.set("workspace_id", workspace.value);
    if (action.value) query.set("action", action.value);
    if (cursor) query.set("before", cursor);
    const found = await json("GET", `/api/v1/audit?${query}`, { signal });
    const shown = found.slice(0, limit);
    return {
      next: found.length > limit ? auditBefore(shown[shown.length - 1]) : null,
      rows: shown.map((row) => h("tr", {},
        h("td", { text: when(row.created_at) }), h("td", { text: row.action }),
        h("td", { title: row.user_id ?? "", text: row.email ?? row.user_id ?? "" }),
        h("td", { title: row.workspace_id ?? "", text: row.workspace_id ? namespaces.get(row.workspace_id) ?? row.workspace_id : "" }),
        h("td", { text: row.ip_address ?? "" }),
        h("td", { text: Object.entries(row.details ?? {}).map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join(", ") }))),
    };
  };
  const log = paged("Audit log, newest first", ["Time", "Action", "Person", "Workspace", "Address", "Details"], load, { signal, busy });
  root.append(form, log.box);
  form.addEventListener("submit", busy(apply, log.restart));
  await log.restart();
}
