// Issued credentials: the kubeconfigs and tokens a person was given (and, for
// a workspace's admins, everyone's in it), live ones first, each revocable.
// Revoking deletes the Secret its token is bound to: the API server itself
// refuses the token from then on, even for kubectl that never passes
// through the gateway.

import { json, call } from "./api.js";
import { h, table } from "./dom.js";
import { mayManage, memberPath } from "./members.js";

// live, expired or revoked, at `now` (a Date).
export function credentialState(credential, now) {
  if (credential.revoked_at) return "revoked";
  return new Date(credential.expires_at) <= now ? "expired" : "live";
}

// Live ones first, then newest issued first.
export function liveFirst(credentials, now) {
  const rank = (c) => (credentialState(c, now) === "live" ? 0 : 1);
  return [...credentials].sort((a, b) => rank(a) - rank(b) || b.issued_at.localeCompare(a.issued_at) || a.id.localeCompare(b.id));
}

// user id -> email, from a workspace's members list (invitations have no id yet).
export function emailsOf(roster) {
  return new Map((roster?.members ?? []).filter((m) => m.user_id).map((m) => [m.user_id, m.email]));
}

export function when(text) {
  return text ? new Date(text).toLocaleString() : "";
}

// ctx: { workspace, me, signal, busy(button, work), notice(text) }
export async function credentialsView(root, ctx) {
  const { workspace, me, signal, busy, notice } = ctx;
  const manage = Boolean(workspace) && mayManage(workspace, me);
  const namespaces = new Map((me.workspaces ?? []).map((w) => [w.id, w.namespace]));
  root.append(h("p", { text: "Every kubeconfig and token issued is listed here until long after it expires. " +
    "Revoke one you lost or no longer use: the API server refuses it within about 10 seconds, " +
    "even where kubectl talks to it directly. Others keep working." }));
  const mine = h("div", { class: "table-scroll" });
  const theirs = h("div", { class: "table-scroll" });
  root.append(mine, theirs);

  const refresh = async () => {
    const now = new Date();
    const [own, all, roster] = await Promise.all([
      json("GET", `/api/v1/credentials?${new URLSearchParams({ user_id: me.id })}`, { signal }),
      manage ? json("GET", `/api/v1/credentials?${new URLSearchParams({ workspace_id: workspace.id })}`, { signal }) : null,
      manage ? json("GET", memberPath(workspace.id), { signal }).catch(() => null) : null,
    ]);
    mine.replaceChildren(table("Your credentials", ["Id", "Workspace", "Kind", "Issued", "Expires", "State", "Address",
      "User agent", "Last use", "Actions"],
    liveFirst(own, now).map((c) => row(c, now, h("td", { text: namespaces.get(c.workspace_id) ?? c.workspace_id })))));
    if (!manage) return;
    const emails = emailsOf(roster);
    const holder = (c) => (c.user_id === me.id ? `${me.email} (you)` : emails.get(c.user_id) ?? c.user_id);
    theirs.replaceChildren(table(`Everyone's credentials in ${workspace.namespace}`, ["Id", "Holder", "Kind", "Issued",
      "Expires", "State", "Address", "User agent", "Last use", "Actions"],
    liveFirst(all, now).map((c) => row(c, now, h("td", { text: holder(c) })))));
  };

  const row = (c, now, who) => {
    const state = credentialState(c, now);
    const cells = [
      h("td", { title: c.id, text: c.id.slice(0, 8) }), who, h("td", { text: c.kind }),
      h("td", { text: when(c.issued_at) }), h("td", { text: when(c.expires_at) }),
      h("td", { class: `credential-${state}`, text: state === "revoked" ? `revoked ${when(c.revoked_at)}` : state }),
      h("td", { text: c.ip_address ?? "" }), h("td", { class: "agent", text: c.user_agent ?? "" }),
      h("td", { text: c.last_used_at ? when(c.last_used_at) : "not seen" }),
      h("td", { class: "actions" }, state === "live" ? revoke(c) : null),
    ];
    return h("tr", { "data-credential": c.id }, cells);
  };

  const revoke = (c) => {
    const button = h("button", { type: "button", "aria-label": `Revoke ${c.id.slice(0, 8)}` }, "Revoke");
    button.addEventListener("click", busy(button, async () => {
      const question = `Revoke the ${c.kind} ${c.id.slice(0, 8)} issued ${when(c.issued_at)}` +
        `${c.ip_address ? ` to ${c.ip_address}` : ""}? The API server refuses it within about 10 seconds; ` +
        "whoever uses it needs a new one.";
      if (!window.confirm(question)) return;
      await call("DELETE", `/api/v1/credentials/${encodeURIComponent(c.id)}`);
      notice(`The ${c.kind} ${c.id.slice(0, 8)} is revoked: the API server refuses it within about 10 seconds.`);
      await refresh();
    }));
    return button;
  };

  await refresh();
}
