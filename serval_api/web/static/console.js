// The console (`/admin`): what `serval admin` shows, live. One long poll
// (`GET /api/v1/admin/overview?since=…&wait=…`) answers nodes, builds and counts once something
// changed (or after `wait` seconds); health, keys and node tokens are re-read with each answer.
// A call that fails or times out says so at once, keeps what was shown (marked stale), and the
// poll is tried again with a growing pause. docs/web-pages.md describes it.
import {
  $, el, call, ApiError, NOT_ANSWERING, bytes, ago, shortTime, remembered, remember, shellQuote,
} from "./common.js";

const KEY = "serval.console.key";
const WAIT_S = 20;
const RETRY_S = [2, 4, 8, 15, 30];
const SCOPES = [
  "read:translation_engines", "create:translation_engines", "update:translation_engines", "delete:translation_engines",
  "read:files", "create:files", "update:files", "delete:files",
  "read:corpora", "create:corpora", "update:corpora", "delete:corpora",
  "read:hooks", "create:hooks", "delete:hooks", "admin",
];
const ADMIN = "/api/v1/admin";

const state = {
  key: "",
  version: null,
  generation: 0,
  controller: null,
  wake: null,
  failures: 0,
  updatedAt: null,
  grpcPort: 50051,
};

const ui = {
  key: $("#key"), state: $("#state"), panels: $("#panels"), updated: $("#updated"),
  health: $("#health"), healthStatus: $("#health-status"),
  nodes: $("#nodes tbody"), noNodes: $("#no-nodes"),
  tokens: $("#tokens tbody"), tokenName: $("#token-name"), tokenCreated: $("#token-created"),
  tokenCommand: $("#token-command"),
  builds: $("#builds tbody"), noBuilds: $("#no-builds"), queueDepth: $("#queue-depth"),
  failures: $("#failures tbody"), noFailures: $("#no-failures"),
  engineCounts: $("#engine-counts"), webhooks: $("#webhooks"),
  keys: $("#keys tbody"), keyOwner: $("#key-owner"), keyEngine: $("#key-engine"),
  keyScopes: $("#key-scopes"), keyCreated: $("#key-created"), keyPlaintext: $("#key-plaintext"),
};

function show(message, kind = "") {
  ui.state.textContent = message;
  ui.state.className = `state ${kind}`;
}

const sleep = (seconds) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, seconds * 1000);
    state.wake = () => {
      clearTimeout(timer);
      resolve();
    };
  });

const admin = (method, path, body) => call(method, ADMIN + path, { key: state.key, body, timeoutMs: 30000 });

// ---- the live loop ----------------------------------------------------------------------------

async function live() {
  const generation = ++state.generation;
  while (generation === state.generation && state.key) {
    state.controller = new AbortController();
    const query = state.version ? `?since=${encodeURIComponent(state.version)}&wait=${WAIT_S}` : "";
    try {
      const { data } = await call("GET", `${ADMIN}/overview${query}`, {
        key: state.key, timeoutMs: (WAIT_S + 15) * 1000, signal: state.controller.signal,
      });
      if (generation !== state.generation) return;
      state.version = data.version;
      state.grpcPort = data.grpcPort;
      renderOverview(data);
      await Promise.all([loadHealth(), loadKeys(), loadTokens()]);
      state.failures = 0;
      state.updatedAt = new Date();
      ui.panels.hidden = false;
      ui.panels.classList.remove("stale");
      show(`Live: updated ${state.updatedAt.toLocaleTimeString()}.`, "ok");
    } catch (error) {
      if (generation !== state.generation) return;
      if (!(error instanceof ApiError)) continue; // abandoned by refresh(): poll again at once
      if (error.status === 401 || error.status === 403) {
        refused(error);
        return;
      }
      const pause = RETRY_S[Math.min(state.failures, RETRY_S.length - 1)];
      state.failures += 1;
      const what = error.status === 0 ? error.message : `${NOT_ANSWERING} properly: ${error.message}`;
      const since = state.updatedAt ? ` What is shown is from ${state.updatedAt.toLocaleTimeString()}.` : "";
      ui.panels.classList.add("stale");
      show(`${what} Trying again in ${pause} s.${since}`, "error");
      await sleep(pause);
    }
  }
}

// Something was changed here: stop waiting and read everything now.
function refresh() {
  state.version = null;
  state.controller?.abort();
  state.wake?.();
}

function refused(error) {
  ui.panels.hidden = true;
  const why = error.status === 401
    ? "The key is not accepted (missing, wrong, revoked or expired)."
    : "This key is not an administrator's: the console needs a key with the admin scope (the service answered 403).";
  show(why, "error refused");
}

function signIn() {
  state.key = ui.key.value.trim();
  remember(sessionStorage, KEY, state.key);
  state.version = null;
  state.failures = 0;
  state.updatedAt = null;
  state.controller?.abort();
  state.wake?.();
  if (!state.key) {
    state.generation += 1;
    ui.panels.hidden = true;
    show("Enter an administrator's API key.");
    return;
  }
  show("Signing in…");
  live();
}

// ---- rendering ----------------------------------------------------------------------------------

function renderOverview(data) {
  renderNodes(data.nodes);
  renderBuilds(data.builds);
  renderSummary(data.summary);
}

function badge(text, kind = text) {
  return el("span", { class: `badge ${kind}` }, text);
}

function meter(value, max, text) {
  return el("div", { class: "gauge" },
    el("meter", { min: 0, max: Math.max(max, 1), value, "aria-label": text }), el("span", {}, text));
}

function renderNodes(nodes) {
  ui.noNodes.hidden = nodes.length > 0;
  ui.nodes.replaceChildren(...nodes.map((node) => {
    const connected = node.status === "serving" || node.status === "draining";
    const budget = (node.memoryHeldBytes || 0) + (node.memoryFreeBytes || 0);
    const memory = connected
      ? meter(node.memoryHeldBytes || 0, budget, `${bytes(node.memoryHeldBytes || 0)} of ${node.memoryFreeBytes ? bytes(budget) : "?"}`)
      : "";
    const work = connected && node.slots ? meter(node.inFlight, node.slots, `${node.inFlight} / ${node.slots} slots`) : "";
    const action = connected
      ? el("button", {
        type: "button", class: node.drained ? "" : "warn", "data-node": node.id,
        onclick: () => drain(node.id, !node.drained),
      }, node.drained ? "Undrain" : "Drain")
      : "";
    return el("tr", { "data-node": node.id },
      el("td", {}, el("code", {}, node.id)),
      el("td", {}, badge(node.status), node.drainReason ? el("div", { class: "sub" }, node.drainReason) : ""),
      el("td", {}, node.device),
      el("td", {}, work),
      el("td", {}, memory),
      el("td", { class: "models" }, loadedModels(node.models || [])),
      el("td", { "data-seen": node.lastSeen, title: shortTime(node.lastSeen) }, ago(node.lastSeen)),
      el("td", {}, node.softwareVersion || ""),
      el("td", {}, action));
  }));
}

// One entry per set of weights (one loaded model, with its size), then the engines it serves.
function loadedModels(models) {
  const groups = new Map();
  for (const model of models) {
    const weights = model.weights || `${model.engineId}/${model.revision}`;
    if (!groups.has(weights)) groups.set(weights, []);
    groups.get(weights).push(model);
  }
  return [...groups.entries()].map(([weights, aliases]) => {
    const size = Math.max(...aliases.map((a) => a.sizeBytes || 0));
    return el("div", { class: "model" },
      el("span", { class: "weights", title: weights }, weights.length > 18 ? weights.slice(0, 16) + "…" : weights),
      size ? ` ${bytes(size)}` : "",
      el("ul", {}, aliases.map((a) =>
        el("li", {}, a.engineId ? el("code", {}, `${a.engineId}/${a.revision}`) : "public base model", " ", badge(a.state),
          a.message ? el("span", { class: "sub" }, ` ${a.message}`) : ""))));
  });
}

function progress(build) {
  if (build.progress === undefined || build.progress === null) return el("span", { class: "sub" }, "not reported");
  const percent = `${Math.round(build.progress * 100)}%`;
  return el("div", { class: "gauge" },
    el("progress", { max: 1, value: build.progress, "aria-label": `progress ${percent}` }),
    el("span", { class: "percent" }, percent));
}

function phase(build) {
  if (!build.phase) return build.state === "Pending" && build.queueDepth ? `queue position ${build.queueDepth}` : "";
  return build.stepCount ? `${build.phase} ${build.step ?? 0}/${build.stepCount}` : build.phase;
}

function buildRow(build, columns) {
  return el("tr", { "data-build": build.id }, columns.map((cell) => el("td", {}, cell)));
}

function renderBuilds(builds) {
  const live = [...builds.running, ...builds.queued];
  ui.queueDepth.textContent = `${builds.running.length} running · ${builds.queued.length} queued · ${builds.queueDepth} waiting for a job slot`;
  ui.noBuilds.hidden = live.length > 0;
  ui.builds.replaceChildren(...live.map((b) => buildRow(b, [
    el("code", { title: b.id }, b.id.slice(0, 10)), b.owner,
    el("span", {}, el("code", {}, b.engineId), " ", el("span", { class: "sub" }, b.engineType)),
    badge(b.state), progress(b), phase(b), b.message || "",
  ])));
  ui.noFailures.hidden = builds.recentFailures.length > 0;
  ui.failures.replaceChildren(...builds.recentFailures.map((b) => buildRow(b, [
    el("code", { title: b.id }, b.id.slice(0, 10)), b.owner, el("code", {}, b.engineId),
    shortTime(b.dateFinished), el("span", { class: "error-text" }, b.message || ""),
  ])));
}

function renderSummary(summary) {
  const types = [...new Set(summary.engines.map((c) => c.engineType))].sort();
  const owners = new Map();
  for (const c of summary.engines) {
    if (!owners.has(c.owner)) owners.set(c.owner, {});
    owners.get(c.owner)[c.engineType] = c.count;
  }
  for (const k of summary.apiKeys) if (!owners.has(k.owner)) owners.set(k.owner, {});
  const keys = new Map(summary.apiKeys.map((k) => [k.owner, k]));
  ui.engineCounts.querySelector("thead").replaceChildren(
    el("tr", {}, el("th", {}, "owner"), types.map((t) => el("th", {}, t)), el("th", {}, "engines"), el("th", {}, "active keys")));
  ui.engineCounts.querySelector("tbody").replaceChildren(...[...owners.keys()].sort().map((owner) => {
    const counts = owners.get(owner);
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    const key = keys.get(owner);
    return el("tr", {}, el("td", {}, owner), types.map((t) => el("td", { class: "num" }, counts[t] || 0)),
      el("td", { class: "num" }, total),
      el("td", { class: "num" }, key ? `${key.active}${key.bound ? ` (${key.bound} bound)` : ""}` : 0));
  }));
  const hooks = summary.webhooks;
  ui.webhooks.replaceChildren(
    el("dt", {}, "webhooks registered"), el("dd", {}, hooks.hooks),
    el("dt", {}, "deliveries waiting"), el("dd", { "data-fact": "pending" }, hooks.pending),
    el("dt", {}, "…being retried"), el("dd", {}, hooks.retrying),
    el("dt", {}, "given up (last day)"), el("dd", {}, hooks.failedRecently),
    el("dt", {}, "oldest waiting"), el("dd", {}, hooks.oldestPendingAt ? ago(hooks.oldestPendingAt) : "none"));
}

async function loadHealth() {
  let report;
  try {
    report = (await call("GET", "/api/v1/status/health", { key: state.key, timeoutMs: 15000 })).data;
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 503 || !error.data) throw error;
    report = error.data; // Unhealthy: the report says what failed
  }
  ui.healthStatus.replaceChildren(badge(report.status, report.status.toLowerCase()));
  ui.updated.textContent = "";
  ui.health.replaceChildren(...Object.entries(report.results || {}).map(([name, entry]) =>
    el("div", { class: "check" },
      el("div", {}, el("strong", {}, name), " ", badge(entry.status, entry.status.toLowerCase())),
      entry.description ? el("div", { class: "sub" }, entry.description) : "",
      entry.exception ? el("div", { class: "error-text" }, entry.exception) : "",
      el("div", { class: "sub" }, Object.entries(entry.data || {}).map(([k, v]) => `${k}: ${v}`).join(" · ")))));
}

async function loadKeys() {
  const { data } = await admin("GET", "/api-keys");
  const now = Date.now();
  ui.keys.replaceChildren(...data.slice().reverse().map((key) => {
    const expired = key.expiresAt && new Date(key.expiresAt).getTime() <= now;
    const status = key.revokedAt ? "revoked" : expired ? "expired" : "active";
    return el("tr", { "data-key": key.id },
      el("td", {}, el("code", {}, `${key.prefix}…`)), el("td", {}, key.owner), el("td", {}, key.name || ""),
      el("td", { class: "scopes-cell" }, key.scopes.join(" ")),
      el("td", {}, key.engineId ? el("code", {}, key.engineId) : ""),
      el("td", {}, shortTime(key.createdAt)), el("td", {}, badge(status)),
      el("td", {}, status === "active"
        ? el("button", { type: "button", class: "warn", onclick: () => revokeKey(key.id) }, "Revoke") : ""));
  }));
}

async function loadTokens() {
  const { data } = await admin("GET", "/node-tokens");
  ui.tokens.replaceChildren(...data.slice().reverse().map((token) =>
    el("tr", { "data-token": token.id },
      el("td", {}, token.name), el("td", {}, el("code", {}, token.id)),
      el("td", {}, shortTime(token.createdAt)), el("td", {}, token.revokedAt ? shortTime(token.revokedAt) : ""),
      el("td", {}, token.revokedAt ? badge("revoked")
        : el("button", { type: "button", class: "warn", onclick: () => revokeToken(token.id) }, "Revoke")))));
}

// ---- actions ------------------------------------------------------------------------------------

// What a button did stays in view (`#action`) while the live view below it redraws.
async function act(what, work) {
  const action = $("#action");
  action.textContent = `${what}…`;
  action.className = "state action";
  try {
    await work();
    action.textContent = `${what}: done.`;
    action.className = "state action ok";
  } catch (error) {
    action.textContent = `${what}: ${error.message}`;
    action.className = "state action error";
  }
  refresh();
}

function drain(nodeId, draining) {
  return act(draining ? `Draining ${nodeId}` : `Undraining ${nodeId}`, () =>
    draining
      ? admin("POST", `/nodes/${encodeURIComponent(nodeId)}/drain`, { reason: "drained from the console" })
      : admin("POST", `/nodes/${encodeURIComponent(nodeId)}/undrain`));
}

function revokeKey(id) {
  return act("Revoking the key", () => admin("DELETE", `/api-keys/${encodeURIComponent(id)}`));
}

function revokeToken(id) {
  return act("Revoking the node token", () => admin("DELETE", `/node-tokens/${encodeURIComponent(id)}`));
}

function createToken() {
  const name = ui.tokenName.value.trim() || "default";
  return act("Creating a node token", async () => {
    const { data } = await admin("POST", "/node-tokens", { name });
    const address = `${location.hostname}:${state.grpcPort}`;
    ui.tokenCommand.textContent =
      `SERVAL_NODE__TOKEN=${shellQuote(data.token)} serval node --api-address ${address} --node-id ${shellQuote(name)}`;
    ui.tokenCreated.hidden = false;
  });
}

function createKey() {
  const owner = ui.keyOwner.value.trim();
  const scopes = [...ui.keyScopes.querySelectorAll("input:checked")].map((box) => box.value);
  const engineId = ui.keyEngine.value.trim();
  if (!owner || !scopes.length) {
    $("#action").textContent = "A key needs an owner and at least one scope.";
    $("#action").className = "state action error";
    return;
  }
  act("Creating an API key", async () => {
    const { data } = await admin("POST", "/api-keys", { owner, scopes, ...(engineId ? { engineId } : {}) });
    ui.keyPlaintext.textContent = data.key;
    ui.keyCreated.hidden = false;
  });
}

// ---- start --------------------------------------------------------------------------------------

ui.keyScopes.append(...SCOPES.map((scope) =>
  el("label", { class: "scope" },
    el("input", { type: "checkbox", value: scope, checked: scope === "read:translation_engines" }), scope)));
$("#sign-in").addEventListener("click", signIn);
$("#sign-out").addEventListener("click", () => {
  ui.key.value = "";
  signIn();
});
ui.key.addEventListener("keydown", (event) => {
  if (event.key === "Enter") signIn();
});
$("#create-token").addEventListener("click", createToken);
$("#create-key").addEventListener("click", createKey);
setInterval(() => {
  for (const cell of document.querySelectorAll("[data-seen]")) cell.textContent = ago(cell.dataset.seen);
}, 1000);
ui.key.value = remembered(sessionStorage, KEY);
signIn();
