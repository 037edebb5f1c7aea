// A workspace's members, invitations and group bindings, and what each
// role may do. Its admins (and the gateway's) change them; any other member
// reads them, and may leave. The gateway decides who may do what: this view
// only leaves out buttons that would be refused.

import { json, call } from "./api.js";
import { h, table } from "./dom.js";

// Whether the signed-in person manages the workspace's members.
export function mayManage(workspace, me) {
  return Boolean(me?.is_admin) || workspace?.role === "admin";
}

// What the roles list says a role may do, as one sentence for a person.
export function roleSentence(role, described) {
  const found = described.find((r) => r.role === role);
  return found ? `${role}: ${found.description}` : role;
}

// Where a member, an invitation or a group binding lives in the API.
export function memberPath(workspaceId, { userId, email, provider, group } = {}) {
  const base = `/api/v1/workspaces/${encodeURIComponent(workspaceId)}`;
  if (userId) return `${base}/members/${encodeURIComponent(userId)}`;
  if (email) return `${base}/invitations/${encodeURIComponent(email)}`;
  if (provider) return `${base}/groups/${encodeURIComponent(provider)}/${encodeURIComponent(group)}`;
  return `${base}/members`;
}

function roleSelect(id, roles, value, label) {
  return h("select", { id, "aria-label": label }, roles.map((r) => h("option", { value: r.role, text: r.role, selected: r.role === value })));
}

// ctx: { workspace, me, signal, busy(button, work), notice(text), left() }
export async function membersView(root, ctx) {
  const { workspace, me, signal, busy, notice } = ctx;
  const manage = mayManage(workspace, me);
  const [roles, providers] = await Promise.all([
    json("GET", "/api/v1/roles", { signal }),
    json("GET", "/api/v1/auth/providers", { signal }).catch(() => []),
  ]);
  root.append(h("p", { text: manage
    ? `You manage the members of ${workspace.namespace}. Each member has their own credentials, bound to their role.`
    : `You are ${workspace.role === "view" ? "a" : "an"} ${workspace.role} member of ${workspace.namespace}: ` +
      "only its admins change its members." }));

  root.append(h("div", { class: "card" }, h("h3", { text: "What each role may do" }),
    h("dl", { class: "facts roles", "aria-label": "Roles" },
      roles.flatMap((r) => [h("dt", { text: r.role }),
        h("dd", {}, r.description, " ", h("span", { class: "muted", text: `(ClusterRole ${r.cluster_role})` }))]))));

  const people = h("div", {});
  const groups = h("div", {});
  root.append(people, groups);

  const refresh = async () => {
    const roster = await json("GET", memberPath(workspace.id), { signal });
    people.replaceChildren(table("Members", ["Email", "Role", "Status", "Added", manage ? "Actions" : "Via"],
      roster.members.map((m) => memberRow(m))));
    groups.replaceChildren(roster.groups.length || manage
      ? table("Group bindings", ["Provider", "Group", "Role", "Added", ...(manage ? ["Actions"] : [])], roster.groups.map((g) => groupRow(g)))
      : "");
  };

  const act = (label, question, work, done) => {
    const button = h("button", { type: "button" }, label);
    button.addEventListener("click", busy(button, async () => {
      if (question && !window.confirm(question)) return;
      await work();
      notice(done);
      await refresh();
    }));
    return button;
  };

  const memberRow = (m) => {
    const added = new Date(m.added_at).toLocaleString();
    const self = m.user_id === me.id;
    const cells = [h("td", { text: m.email + (self ? " (you)" : "") })];
    if (manage && m.status === "active") {
      const select = roleSelect(`role-${m.user_id}`, roles, m.role, `Role of ${m.email}`);
      select.addEventListener("change", busy(select, async () => {
        try {
          await json("PATCH", memberPath(workspace.id, { userId: m.user_id }), { body: { role: select.value } });
        } catch (error) {
          select.value = m.role;
          throw error;
        }
        notice(`${m.email} is now ${roleSentence(select.value, roles)}`);
        await refresh();
      }));
      cells.push(h("td", {}, select));
    } else {
      cells.push(h("td", { text: m.role }));
    }
    cells.push(h("td", { text: m.status === "invited" ? "invited: joins at their next single sign-on" : "active" }),
      h("td", { text: added }));
    const leave = () => {
      const button = h("button", { type: "button" }, "Leave");
      button.addEventListener("click", busy(button, async () => {
        if (!window.confirm(`Leave ${workspace.namespace}? Your credentials for it stop working at once.`)) return;
        await call("DELETE", memberPath(workspace.id, { userId: m.user_id }));
        await ctx.left(`You left ${workspace.namespace}.`);
      }));
      return button;
    };
    if (manage) {
      cells.push(h("td", { class: "actions" }, m.status === "invited"
        ? act("Cancel invitation", `Cancel the invitation of ${m.email}?`,
          () => call("DELETE", memberPath(workspace.id, { email: m.email })), `The invitation of ${m.email} is cancelled.`)
        : self ? leave()
          : act("Remove", `Remove ${m.email} from ${workspace.namespace}? Their credentials, watches and terminals end at once.`,
            () => call("DELETE", memberPath(workspace.id, { userId: m.user_id })), `${m.email} is no longer a member.`)));
    } else {
      cells.push(h("td", { class: "actions" }, m.via === "group" ? "group" : "direct", self ? [" ", leave()] : null));
    }
    return h("tr", {}, cells);
  };

  const groupRow = (g) => h("tr", {},
    h("td", { text: g.provider }), h("td", { text: g.group }), h("td", { text: g.role }),
    h("td", { text: new Date(g.added_at).toLocaleString() }),
    manage ? h("td", { class: "actions" }, act("Unbind", `Unbind the group ${g.group} of ${g.provider}? Its members who joined through it lose access.`,
      () => call("DELETE", memberPath(workspace.id, { provider: g.provider, group: g.group })),
      `The group ${g.group} is unbound.`)) : null);

  await refresh();
  if (!manage) return;

  // Invite by email: the same answer whether or not the email has an account.
  const email = h("input", { id: "invite-email", type: "email", required: true, maxlength: 254, autocomplete: "off" });
  const inviteRole = roleSelect("invite-role", roles, "view");
  const invite = h("button", { type: "submit", class: "primary" }, "Invite");
  const inviteForm = h("form", { class: "card" }, h("h3", { text: "Invite by email" }),
    h("p", { text: "The invitation becomes a membership when someone signs in with this email through single sign-on, " +
      "which vouches for the address." }),
    h("label", { for: "invite-email", text: "Email" }), email,
    h("label", { for: "invite-role", text: "Role" }), inviteRole,
    h("div", { class: "row" }, invite));
  inviteForm.addEventListener("submit", busy(invite, async () => {
    const invited = await json("POST", memberPath(workspace.id), { body: { email: email.value.trim(), role: inviteRole.value } });
    email.value = "";
    notice(`${invited.email} is invited as ${invited.role}.`);
    await refresh();
  }));
  root.append(inviteForm);

  if (!providers?.length) return;
  const provider = h("select", { id: "group-provider" }, providers.map((p) => h("option", { value: p.name, text: p.display_name || p.name })));
  const group = h("input", { id: "group-name", type: "text", required: true, maxlength: 255, autocomplete: "off", spellcheck: "false" });
  const groupRole = roleSelect("group-role", roles, "view");
  const bind = h("button", { type: "submit" }, "Bind group");
  const groupForm = h("form", { class: "card" }, h("h3", { text: "Bind a group" }),
    h("p", { text: "Everyone the provider says is in the group becomes a member at their next sign-in, and stops being one " +
      "when the provider no longer lists them." }),
    h("label", { for: "group-provider", text: "Provider" }), provider,
    h("label", { for: "group-name", text: "Group" }), group,
    h("label", { for: "group-role", text: "Role" }), groupRole,
    h("div", { class: "row" }, bind));
  groupForm.addEventListener("submit", busy(bind, async () => {
    await json("POST", memberPath(workspace.id), { body: { group: group.value, provider: provider.value, role: groupRole.value } });
    notice(`The group ${group.value} is bound as ${groupRole.value}.`);
    group.value = "";
    await refresh();
  }));
  root.append(groupForm);
}
