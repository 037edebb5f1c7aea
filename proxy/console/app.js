// The console: sign-in, the workspaces one belongs to (picked in the
// switcher), their members, issued credentials, activity and live
// resources, and for administrators every workspace, users and the audit
// log. All state is the gateway's; this file only asks for it and shows it.

import { ApiError, call, json } from "./api.js";
import { h, table } from "./dom.js";
import { followLog, watchCollection } from "./streams.js";
import { KUBECONFIG, formats as kubeconfigFormats, howToUse } from "./kubeconfigs.js";
import { Terminal } from "./terminal.js";
import { membersView, roleSentence } from "./members.js";
import { credentialsView } from "./credentials.js";
import { activityView, auditView } from "./activity.js";

const $ = (id) => document.getElementById(id);
const state = { me: null, workspace: null, view: null, controller: null, panel: null, terminal: null, noticeFrom: null };

// ---- notices -------------------------------------------------------------

function notice(message, from = "action") {
  const box = $("notice");
  box.textContent = message;
  box.hidden = false;
  state.noticeFrom = from;
}

function clearNotice(from) {
  if (from !== undefined && state.noticeFrom !== from) return;
  $("notice").hidden = true;
  $("notice").textContent = "";
  state.noticeFrom = null;
}

// Any failure ends here: an ended session goes back to sign-in, anything
// else is said in words. Returns whether the caller may carry on.
function failed(error, from = "action") {
  if (error?.name === "AbortError") return false;
  if (error instanceof ApiError && error.status === 401) {
    signedOut(error.message);
    return false;
  }
  notice(error instanceof ApiError ? error.message : "Something went wrong in the console. Reload the page.", from);
  return true;
}

function busy(button, work) {
  return async (event) => {
    event?.preventDefault();
    button.disabled = true;
    try {
      await work();
    } catch (error) {
      failed(error);
    } finally {
      button.disabled = false;
    }
  };
}

// ---- signing in and out --------------------------------------------------

function stopView() {
  state.controller?.abort();
  state.controller = null;
  state.terminal?.close();
  state.terminal = null;
}

function signedOut(message) {
  stopView();
  state.me = null;
  state.workspace = null;
  state.view = null;
  $("switcher").replaceChildren();
  $("switcher").hidden = true;
  $("signed-in").hidden = true;
  $("sign-out").hidden = true;
  $("who").textContent = "";
  $("sign-in").hidden = false;
  if (message) notice(message, "session");
  else clearNotice();
  $("email").focus();
}

async function providers() {
  const box = $("providers");
  box.replaceChildren();
  let found = [];
  try {
    found = await json("GET", "/api/v1/auth/providers");
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) return; // no single sign-on here
  }
  for (const provider of found ?? []) {
    // Back to this page after signing in (the device page, without any code: it is typed).
    const next = location.pathname === "/" ? "" : `?next=${encodeURIComponent(location.pathname)}`;
    box.append(h("a", { class: "button", href: provider.login_url + next, text: `Sign in with ${provider.display_name || provider.name}` }));
  }
}

async function signIn() {
  const body = { email: $("email").value, password: $("password").value };
  await json("POST", "/api/v1/auth/login", { body });
  $("password").value = "";
  await load();
}

async function register() {
  const body = { email: $("email").value, password: $("password").value };
  await json("POST", "/api/v1/auth/register", { body });
  await signIn();
}

async function signOut() {
  try {
    await call("POST", "/api/v1/auth/logout");
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401)) throw error;
  }
  signedOut();
  notice("You are signed out.", "session");
}

// The workspace shown: the one picked before (kept for the tab), else the
// person's own, else the first they are a member of.
const PICKED = "picked-workspace";

function pickWorkspace(held, wanted) {
  return held.find((w) => w.id === wanted) ?? held.find((w) => w.user_id === state.me.id) ?? held[0] ?? null;
}

function choose(workspace) {
  state.workspace = workspace;
  if (workspace) sessionStorage.setItem(`${PICKED}:${state.me.id}`, workspace.id);
}

function renderSwitcher() {
  const held = state.me.workspaces ?? [];
  const box = $("switcher");
  box.hidden = held.length < 2;
  if (box.hidden) {
    box.replaceChildren();
    return;
  }
  // The cluster too, once they are on more than one: named as the combined kubeconfig's contexts are.
  const clusters = new Set(held.map((w) => w.cluster));
  const select = h("select", { id: "workspace-picker" }, held.map((w) => h("option", {
    value: w.id, selected: w.id === state.workspace?.id,
    text: `${clusters.size > 1 ? `${w.cluster}/` : ""}${w.namespace} (${w.user_id === state.me.id ? "yours, " : ""}${w.role})` })));
  select.addEventListener("change", () => {
    choose(held.find((w) => w.id === select.value) ?? null);
    show(state.view ?? "My workspace");
  });
  box.replaceChildren(h("label", { for: "workspace-picker", text: "Workspace" }), select);
}

async function load(wanted) {
  state.me = await json("GET", "/api/v1/me");
  choose(pickWorkspace(state.me.workspaces ?? [], wanted ?? state.workspace?.id ?? sessionStorage.getItem(`${PICKED}:${state.me.id}`)));
  clearNotice();
  $("sign-in").hidden = true;
  $("signed-in").hidden = false;
  $("sign-out").hidden = false;
  $("who").textContent = state.me.email + (state.me.is_admin ? " (administrator)" : "");
  renderTabs();
  renderSwitcher();
  if (location.pathname === DEVICE_PAGE) {
    deviceView();
    return;
  }
  const view = VIEWS[state.view];
  show(view && (!view.admin || state.me.is_admin) ? state.view : "My workspace");
}

// ---- device sign-in ------------------------------------------------------

// `tenant-gateway login` sends its user here, to /device. The person types
// the code their own terminal shows: a code in the link is ignored (and
// dropped from the address bar), since whoever sends a link chooses its
// code, and a link someone else started must not sign their command line
// in as you (RFC 8628 section 5.4). The page then shows what asked for the
// typed code, and only a click on Approve signs it in.
const DEVICE_PAGE = "/device";

function deviceView() {
  stopView();
  for (const tab of $("views").children) tab.setAttribute("aria-current", "false");
  if (location.search) history.replaceState(null, "", DEVICE_PAGE);
  const code = h("input", { id: "user-code", name: "user_code", autocomplete: "off", spellcheck: "false", required: true,
    maxlength: 32 });
  const next = h("button", { type: "submit", class: "primary" }, "Continue");
  const cancel = () => show("My workspace");
  const form = h("form", {},
    h("label", { for: "user-code", text: "Code" }), code,
    h("div", { class: "row" }, next, h("button", { type: "button", onclick: cancel }, "Cancel")));
  const root = h("section", { class: "card narrow", "aria-labelledby": "view-title" },
    h("h2", { id: "view-title", text: "Sign in a command line" }),
    h("p", { text: "Type the code your terminal shows after you ran tenant-gateway login. " +
      "If someone else sent you a link or a code, stop: they are asking you to sign their command line in as you." }),
    form);
  form.addEventListener("submit", busy(next, async () => {
    const asked = await json("POST", "/api/v1/auth/device/lookup", { body: { user_code: code.value } });
    confirmDevice(root, code.value, asked, cancel);
  }));
  $("view").replaceChildren(root);
  code.focus();
}

// What asked for the typed code, for the person to judge: its name is its
// own claim, the address and the time are what the gateway saw.
function confirmDevice(root, userCode, asked, cancel) {
  const started = new Date(asked.started_at);
  const minutes = Math.max(0, Math.round((Date.now() - started.getTime()) / 60000));
  const approve = h("button", { type: "button", class: "primary" }, "Approve");
  root.replaceChildren(
    h("h2", { id: "view-title", text: "Sign in a command line" }),
    h("h3", { text: "Check what asked for this code" }),
    h("dl", { class: "facts", "aria-label": "What asked" },
      h("dt", { text: "Code" }), h("dd", { text: userCode.toUpperCase() }),
      h("dt", { text: "Calls itself" }), h("dd", { text: asked.client_name ?? "(no name given)" }),
      h("dt", { text: "From address" }), h("dd", { text: asked.client_address ?? "(unknown)" }),
      h("dt", { text: "Asked at" }), h("dd", { text: `${started.toLocaleString()} (${minutes} min ago)` })),
    h("p", { text: "The name is the command line's own claim: anything can call itself anything. " +
      "The address and the time are what the gateway saw." }),
    h("p", { text: `Approving lets that command line fetch credentials for the workspaces of ${state.me.email} ` +
      "until it signs out or its session ends. It cannot administer, change anything in the console or act as you here. " +
      "Approve only if you started it yourself, just now, from that address." }),
    h("div", { class: "row" }, approve, h("button", { type: "button", onclick: cancel }, "Cancel")));
  approve.addEventListener("click", busy(approve, async () => {
    await call("POST", "/api/v1/auth/device/approve", { body: { user_code: userCode } });
    history.replaceState(null, "", "/");
    root.replaceChildren(h("h2", { id: "view-title", text: "Command line signed in" }),
      h("p", { text: "Go back to your terminal: it carries on by itself." }));
  }));
  approve.focus();
}

// ---- views ---------------------------------------------------------------

const KINDS = {
  Pods: { group: "api/v1", plural: "pods", kind: "Pod", describe: (p) => p.metadata.deletionTimestamp ? "Terminating" : (p.status?.phase ?? "") },
  Deployments: { group: "apis/apps/v1", plural: "deployments", kind: "Deployment",
    describe: (d) => `${d.status?.readyReplicas ?? 0}/${d.spec?.replicas ?? 0} ready` },
  Services: { group: "api/v1", plural: "services", kind: "Service",
    describe: (s) => `${s.spec?.type ?? ""} ${s.spec?.clusterIP ?? ""}`.trim() },
  "Config maps": { group: "api/v1", plural: "configmaps", kind: "ConfigMap",
    describe: (c) => `${Object.keys(c.data ?? {}).length} keys` },
};

const VIEWS = {
  "My workspace": { render: workspaceView },
  Members: { render: (root, signal) => needsWorkspace(root) ? Promise.resolve() : membersView(root, {
    workspace: state.workspace, me: state.me, signal, busy, notice, left: leftWorkspace }) },
  Credentials: { render: (root, signal) => credentialsView(root, { workspace: state.workspace, me: state.me, signal, busy, notice }) },
  Activity: { render: (root, signal) => activityView(root, { workspace: state.workspace, me: state.me, signal, busy }) },
  ...Object.fromEntries(Object.keys(KINDS).map((name) => [name, { render: (root, signal) => resourceView(name, root, signal) }])),
  Workspaces: { admin: true, render: workspacesView },
  Users: { admin: true, render: usersView },
  Audit: { admin: true, render: (root, signal) => auditView(root, { signal, busy }) },
};

function renderTabs() {
  const nav = $("views");
  nav.replaceChildren(...Object.entries(VIEWS)
    .filter(([, view]) => !view.admin || state.me.is_admin)
    .map(([name]) => h("button", { type: "button", "data-view": name, onclick: () => show(name) }, name)));
}

function show(name) {
  if (location.pathname === DEVICE_PAGE) history.replaceState(null, "", "/");
  stopView();
  if (state.noticeFrom !== "session") clearNotice();
  state.view = name;
  state.controller = new AbortController();
  for (const tab of $("views").children) tab.setAttribute("aria-current", String(tab.dataset.view === name));
  const root = h("section", { "aria-labelledby": "view-title" }, h("h2", { id: "view-title", text: name }));
  $("view").replaceChildren(root);
  VIEWS[name].render(root, state.controller.signal).catch((error) => failed(error));
}

function k8s(path) {
  const ws = state.workspace;
  return `/k8s/${ws.id}/${path}`;
}

function namespaced(group, plural, name = "") {
  return k8s(`${group}/namespaces/${state.workspace.namespace}/${plural}${name ? `/${encodeURIComponent(name)}` : ""}`);
}

function needsWorkspace(root) {
  if (state.workspace) return false;
  root.append(h("p", {}, "You have no workspace yet. ", h("button", { type: "button", onclick: () => show("My workspace") }, "Set one up")));
  return true;
}

// Anyone without a workspace of their own may make one (members of other
// workspaces too).
function createForm(api) {
  const tiers = api.components.schemas.InitRequest.properties.tier.enum ?? ["basic"];
  const select = h("select", { id: "tier" }, tiers.map((tier) => h("option", { value: tier, text: tier })));
  const create = h("button", { type: "submit", class: "primary" }, "Create workspace");
  const form = h("form", { class: "card narrow" },
    h("p", { text: "A workspace is your own namespace in the cluster, with a quota from its tier." }),
    h("label", { for: "tier", text: "Tier" }), select, h("div", { class: "row" }, create));
  form.addEventListener("submit", busy(create, async () => {
    notice("Creating the workspace…", "progress");
    const made = await json("POST", "/api/v1/workspaces/init", { body: { tier: select.value } });
    await load(made.id);
  }));
  return form;
}

async function leftWorkspace(message) {
  state.workspace = null;
  await load();
  notice(message);
}

async function workspaceView(root) {
  const [api, described] = await Promise.all([json("GET", "/api/v1/openapi.json"), json("GET", "/api/v1/roles")]);
  if (!state.workspace) {
    root.append(createForm(api));
    return;
  }
  const ws = state.workspace;
  const owned = ws.user_id === state.me.id;
  root.append(h("dl", { class: "facts" },
    h("dt", { text: "Namespace" }), h("dd", { text: ws.namespace }),
    h("dt", { text: "Cluster" }), h("dd", { text: ws.cluster ?? "default" }),
    h("dt", { text: "Your role" }), h("dd", { class: "words", text: roleSentence(ws.role, described) + (owned ? " You own it." : "") }),
    h("dt", { text: "Tier" }), h("dd", { text: ws.tier }),
    h("dt", { text: "Status" }), h("dd", { text: ws.status }),
    h("dt", { text: "Workspace id" }), h("dd", { text: ws.id })));
  const formats = kubeconfigFormats(api);
  const format = h("select", { id: "kubeconfig-format" }, formats.map((f) => h("option", { value: f, text: f })));
  const explanation = h("p", {});
  const commands = h("pre", { class: "commands" });
  const explain = () => {
    [explanation.textContent, commands.textContent] = howToUse(format.value, location.origin);
  };
  format.addEventListener("change", explain);
  explain();
  const download = h("button", { type: "button", class: "primary" }, "Download kubeconfig");
  download.addEventListener("click", busy(download, () => downloadKubeconfig(format.value)));
  // Every workspace of the caller's in one file, a context each, named <cluster>/<namespace>.
  const combined = h("button", { type: "button" }, "One file for all my workspaces");
  combined.addEventListener("click", busy(combined, () => downloadKubeconfig(format.value, true)));
  root.append(h("div", { class: "card" },
    h("h3", { text: "Use it with kubectl" }),
    formats.length > 1 ? h("div", { class: "row" }, h("label", { for: "kubeconfig-format", text: "Format" }), format) : null,
    h("div", { class: "row" }, download, (state.me.workspaces ?? []).length > 1 ? combined : null),
    explanation, commands));
  const quota = h("div", { class: "card" }, h("p", { text: "Reading the quota…" }));
  root.append(quota);
  const quotas = await json("GET", namespaced("api/v1", "resourcequotas"));
  const rows = [];
  for (const item of quotas.items ?? []) {
    for (const [resource, hard] of Object.entries(item.status?.hard ?? item.spec?.hard ?? {})) {
      rows.push(h("tr", {}, h("td", { text: resource }), h("td", { text: item.status?.used?.[resource] ?? "0" }), h("td", { text: hard })));
    }
  }
  quota.replaceChildren(table("Quota use", ["Resource", "Used", "Hard"], rows));
  if (!(state.me.workspaces ?? []).some((w) => w.user_id === state.me.id)) {
    root.append(h("h3", { text: "A workspace of your own" }), createForm(api));
  }
}

async function downloadKubeconfig(format, all = false) {
  const query = new URLSearchParams(all ? { all: "true" } : { workspace_id: state.workspace.id });
  if (format !== "token") query.set("format", format);
  const blob = await (await call("GET", `${KUBECONFIG}?${query}`)).blob();
  const url = URL.createObjectURL(blob);
  const link = h("a", { href: url, download: "kubeconfig.yaml" });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
  notice(format === "token" ? "kubeconfig.yaml downloaded: its token is valid for 2 hours." : "kubeconfig.yaml downloaded.", "action");
}

async function resourceView(name, root, signal) {
  if (needsWorkspace(root)) return;
  const kind = KINDS[name];
  const list = h("ul", { class: "resources", "aria-label": name });
  const detail = h("div", { class: "detail" });
  root.append(h("div", { class: "split" }, h("div", {}, list, manifestForm()), detail));
  await watchCollection(namespaced(kind.group, kind.plural), {
    signal,
    onChange: (items) => {
      clearNotice("watch");
      const names = [...items.keys()].sort();
      list.replaceChildren(...(names.length ? names.map((item) => resourceRow(name, items.get(item), detail))
        : [h("li", { class: "empty", text: `No ${name.toLowerCase()} yet.` })]));
    },
    onError: (error) => {
      if (error.code === "workspace_suspended") list.replaceChildren(h("li", { class: "empty", text: "No access while the workspace is suspended." }));
      return failed(error, "watch");
    },
  });
}

function resourceRow(name, item, detail) {
  const label = item.metadata.name;
  const row = h("li", {}, h("span", { class: "name", text: label }), h("span", { class: "state", text: KINDS[name].describe(item) }));
  if (name === "Pods") {
    row.append(h("span", { class: "actions" },
      h("button", { type: "button", onclick: () => openLogs(label, detail) }, "Logs"),
      h("button", { type: "button", onclick: () => openTerminal(label, detail) }, "Terminal")));
  }
  return row;
}

function manifestForm() {
  // A pod as workspaces admit it: Pod Security `restricted` (a non-root
  // numeric user, the runtime's seccomp profile, no escalation, no
  // capabilities) and an image pulled with the tenant's own right (Always).
  const text = h("textarea", { id: "manifest", rows: "8", spellcheck: "false",
    placeholder: '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello"}, "spec": {'
      + '"securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}, '
      + '"containers": [{"name": "main", "image": "registry.example/team/app:1", "imagePullPolicy": "Always", '
      + '"securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}' });
  const create = h("button", { type: "submit" }, "Create");
  const form = h("form", { class: "card" }, h("label", { for: "manifest", text: "Manifest (JSON)" }), text, h("div", { class: "row" }, create));
  form.addEventListener("submit", busy(create, async () => {
    let manifest;
    try {
      manifest = JSON.parse(text.value);
    } catch {
      notice("The manifest is not valid JSON.");
      return;
    }
    const kind = Object.values(KINDS).find((k) => k.kind === manifest?.kind);
    if (!kind) {
      notice(`The console creates ${Object.values(KINDS).map((k) => k.kind).join(", ")}; use kubectl for anything else.`);
      return;
    }
    await json("POST", namespaced(kind.group, kind.plural), { body: manifest });
    notice(`${manifest.kind} ${manifest.metadata?.name ?? ""} created.`);
    text.value = "";
  }));
  return form;
}

function panel(detail, title) {
  state.terminal?.close();
  state.terminal = null;
  state.panel?.abort();
  state.panel = new AbortController();
  state.controller.signal.addEventListener("abort", () => state.panel.abort(), { once: true });
  const status = h("p", { class: "status", role: "status" });
  const heading = h("h3", { text: title });
  detail.replaceChildren(heading, status);
  return { signal: state.panel.signal, status };
}

function openLogs(pod, detail) {
  const { signal, status } = panel(detail, `Logs of ${pod}`);
  const output = h("pre", { class: "log", "aria-label": `Logs of ${pod}`, tabindex: "0" });
  detail.append(output);
  status.textContent = "Following…";
  followLog(`${namespaced("api/v1", "pods", pod)}/log?follow=true&tailLines=1000`, {
    signal, onText: (text) => { output.append(text); output.scrollTop = output.scrollHeight; },
  }).then(() => { status.textContent = "The log stream ended."; })
    .catch((error) => { if (failed(error)) status.textContent = "The log stream ended."; });
}

function openTerminal(pod, detail) {
  const { status } = panel(detail, `Terminal in ${pod}`);
  const output = h("pre", { class: "terminal", "aria-label": `Terminal output of ${pod}`, tabindex: "0" });
  const input = h("input", { id: "command", type: "text", autocomplete: "off", spellcheck: "false" });
  const form = h("form", { class: "row" }, h("label", { for: "command", text: "Command" }), input, h("button", { type: "submit" }, "Send"));
  detail.append(output, form);
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const query = "command=sh&stdin=true&stdout=true&stderr=false&tty=true";
  const url = `${scheme}//${location.host}${namespaced("api/v1", "pods", pod)}/exec?${query}`;
  status.textContent = "Connecting…";
  const terminal = new Terminal(url, output, (message) => { status.textContent = message; });
  terminal.socket.addEventListener("open", () => { status.textContent = "Connected. Type a command and press Enter."; input.focus(); });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    terminal.send(`${input.value}\r`);
    input.value = "";
  });
  state.terminal = terminal;
}

// ---- administrators ------------------------------------------------------

// There is no list of users in the API: the people who registered are in
// the audit log (accounts made with the command line are not).
function registrations() {
  return json("GET", "/api/v1/audit?action=Register&limit=1000");
}

async function workspacesView(root) {
  const [workspaces, registered] = await Promise.all([json("GET", "/api/v1/workspaces?all=true"), registrations()]);
  const emails = new Map(registered.map((row) => [row.user_id, row.details?.email]));
  const rows = workspaces.map((ws) => {
    const act = (verb, question) => {
      const button = h("button", { type: "button", disabled: (verb === "suspend") === (ws.status === "suspended") },
        verb === "suspend" ? "Suspend" : "Resume");
      button.addEventListener("click", busy(button, async () => {
        if (!window.confirm(question)) return;
        notice(verb === "suspend" ? `Suspending ${ws.namespace}…` : `Resuming ${ws.namespace}: about 15 seconds…`, "progress");
        await json("POST", `/api/v1/workspaces/${ws.id}/${verb}`);
        show("Workspaces");
        notice(`${ws.namespace} is ${verb === "suspend" ? "suspended" : "active again"}.`);
      }));
      return button;
    };
    return h("tr", {},
      h("td", { text: ws.namespace }), h("td", { text: ws.cluster ?? "default" }),
      h("td", { text: emails.get(ws.user_id) ?? ws.user_id }), h("td", { text: ws.tier }),
      h("td", { class: `status-${ws.status}`, text: ws.status }),
      h("td", { class: "actions" },
        act("suspend", `Suspend ${ws.namespace}? Its owner loses access at once: kubeconfigs, watches and terminals end.`),
        act("resume", `Resume ${ws.namespace}? Its owner needs a new kubeconfig.`)));
  });
  root.append(table("Every workspace", ["Namespace", "Cluster", "Owner", "Tier", "Status", "Actions"], rows));
}

async function usersView(root) {
  const registered = await registrations();
  const rows = registered.map((row) => {
    const act = (verb) => {
      const button = h("button", { type: "button" }, verb === "suspend" ? "Suspend user" : "Resume user");
      button.addEventListener("click", busy(button, async () => {
        const email = row.details?.email ?? row.user_id;
        if (!window.confirm(`${verb === "suspend" ? "Suspend" : "Resume"} ${email}?`)) return;
        const result = await json("POST", `/api/v1/users/${row.user_id}/${verb}`);
        notice(`${email} is ${result.status}.`);
      }));
      return button;
    };
    return h("tr", {}, h("td", { text: row.details?.email ?? "" }), h("td", { text: row.user_id }),
      h("td", { text: new Date(row.created_at).toLocaleString() }), h("td", { class: "actions" }, act("suspend"), act("resume")));
  });
  root.append(h("p", { text: "Users who registered themselves (accounts made with the command line are not listed)." }),
    table("Registered users", ["Email", "User id", "Registered", "Actions"], rows));
}

// ---- start ---------------------------------------------------------------

function start() {
  const form = $("sign-in-form");
  const submit = form.querySelector("button[type=submit]");
  form.addEventListener("submit", busy(submit, signIn));
  $("register").addEventListener("click", busy($("register"), register));
  $("sign-out").addEventListener("click", busy($("sign-out"), signOut));
  providers();
  load().catch((error) => {
    if (error instanceof ApiError && error.status === 401) signedOut();
    else failed(error);
  });
}

start();
