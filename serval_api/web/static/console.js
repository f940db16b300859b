// The console (`/admin`): what `serval admin` shows, live. One long poll
// (`GET /api/v1/admin/overview?since=…&wait=…`) answers nodes, builds and counts once something
// changed (or after `wait` seconds); health, keys, node tokens, engines and base models are re-read
// with each answer. Loaded models and builds show engines by name (from the engine list).
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
  engines: new Map(), // engine id → the admin API's engine
  engineFilter: "",
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
  history: $("#history tbody"), noHistory: $("#no-history"),
  engines: $("#engines tbody"), noEngines: $("#no-engines"), engineTotal: $("#engine-total"),
  engineFilter: $("#engine-filter"),
  baseModels: $("#base-models tbody"), noBaseModels: $("#no-base-models"), baseModelProblems: $("#base-model-problems"),
  stateHelp: $("#state-help"),
};

function show(message, kind = "") {
  ui.state.textContent = message;
  ui.state.className = `state ${kind}`;
  ui.stateHelp.hidden = true;
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
      await Promise.all([loadHealth(), loadKeys(), loadTokens(), loadEngines(), loadBaseModels()]);
      if (generation !== state.generation) return;
      renderOverview(data); // after the engines: it names them
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
      const stopping = error.status === 503 && error.retryAfter;
      const pause = stopping ? error.retryAfter : RETRY_S[Math.min(state.failures, RETRY_S.length - 1)];
      state.failures += 1;
      const what = error.status === 0 ? error.message
        : stopping ? `${error.message.charAt(0).toUpperCase()}${error.message.slice(1)}.`
          : `${NOT_ANSWERING} properly: ${error.message}`;
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

// 401: the key itself; 403: a key without the admin scope, and how to make one that has it.
function refused(error) {
  ui.panels.hidden = true;
  const why = error.status === 401
    ? "The key is not accepted (missing, wrong, revoked or expired)."
    : "This key is not an administrator's: the console needs a key with the admin scope (the service answered 403).";
  show(why, "error refused");
  ui.stateHelp.hidden = error.status !== 403;
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
    const users = connected ? ownersAtWork(node.workByOwner || []) : "";
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
      el("td", {}, work, users),
      el("td", {}, memory),
      el("td", { class: "models" }, loadedModels(node.models || [])),
      el("td", { "data-seen": node.lastSeen, title: shortTime(node.lastSeen) }, ago(node.lastSeen)),
      el("td", {}, node.softwareVersion || ""),
      el("td", {}, action));
  }));
}

// Who uses the node: the busiest owners' requests on it now, "owner 12 (8 bulk)".
function ownersAtWork(owners) {
  if (!owners.length) return "";
  return el("div", { class: "sub", "data-owners": "" }, ...owners.flatMap((o, i) => [
    i ? " · " : "",
    el("span", { "data-owner": o.owner, title: `${o.interactive} interactive, ${o.bulk} bulk` },
      el("code", {}, o.owner), ` ${o.interactive + o.bulk}${o.bulk ? ` (${o.bulk} bulk)` : ""}`),
  ]));
}

// An engine by name (with its id), as the engine list knows it; the id alone for one without a name.
function engineLabel(engineId, name = state.engines.get(engineId)?.name) {
  return el("span", { class: "engine-label" },
    name ? el("strong", {}, name) : "", name ? " " : "", el("code", {}, engineId));
}

// One entry per loaded model (a set of weights, with its size; revisions sharing weights share it),
// listing what it serves: each engine by name and revision, or the base model served as it is.
function loadedModels(models) {
  const groups = new Map();
  for (const model of models) {
    const weights = model.weights || `${model.engineId}/${model.revision}`;
    if (!groups.has(weights)) groups.set(weights, []);
    groups.get(weights).push(model);
  }
  return [...groups.entries()].map(([weights, aliases]) => {
    const size = Math.max(...aliases.map((a) => a.sizeBytes || 0));
    return el("div", { class: "model", title: `weights ${weights}` },
      el("span", { class: "sub" }, aliases.length > 1 ? `one model for ${aliases.length}` : "model",
        size ? `, ${bytes(size)}` : ""),
      el("ul", {}, aliases.map((a) =>
        el("li", { "data-engine": a.engineId || null },
          a.engineId
            ? [engineLabel(a.engineId, a.engineName || undefined), ` revision ${a.revision}`]
            : ["base model ", el("strong", {}, a.baseModel || "?")],
          " ", badge(a.state), a.message ? el("span", { class: "sub" }, ` ${a.message}`) : ""))));
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
    el("span", {}, engineLabel(b.engineId), " ", el("span", { class: "sub" }, b.engineType)),
    badge(b.state), progress(b), phase(b), b.message || "",
  ])));
  ui.noFailures.hidden = builds.recentFailures.length > 0;
  ui.failures.replaceChildren(...builds.recentFailures.map((b) => buildRow(b, [
    el("code", { title: b.id }, b.id.slice(0, 10)), b.owner, engineLabel(b.engineId),
    shortTime(b.dateFinished), el("span", { class: "error-text" }, b.message || ""),
  ])));
  const recent = builds.recent || [];
  ui.noHistory.hidden = recent.length > 0;
  ui.history.replaceChildren(...recent.map((b) => buildRow(b, [
    el("code", {}, b.id), engineLabel(b.engineId), b.owner, badge(b.state),
    shortTime(b.dateCreated), b.dateStarted ? shortTime(b.dateStarted) : "",
    b.dateFinished ? shortTime(b.dateFinished) : "",
    el("span", { class: b.state === "Faulted" ? "error-text" : "" }, b.message || ""),
  ])));
}

// ---- engines and base models ------------------------------------------------------------------

async function loadEngines() {
  const { data } = await admin("GET", "/engines");
  state.engines = new Map(data.map((engine) => [engine.id, engine]));
  renderEngines();
}

function engineText(engine) {
  return [engine.id, engine.name, engine.owner, engine.engineType, engine.sourceLanguage, engine.targetLanguage]
    .filter(Boolean).join(" ").toLowerCase();
}

function renderEngines() {
  const all = [...state.engines.values()];
  const wanted = state.engineFilter.trim().toLowerCase();
  const shown = wanted ? all.filter((engine) => engineText(engine).includes(wanted)) : all;
  ui.noEngines.hidden = all.length > 0;
  ui.engineTotal.textContent = wanted ? `${shown.length} of ${all.length}` : `${all.length}`;
  ui.engines.replaceChildren(...shown.map((engine) => {
    const build = engine.lastBuild;
    const last = build
      ? el("div", {}, badge(build.state), " ",
        el("span", { class: "sub" }, shortTime(build.dateFinished || build.dateStarted || build.dateCreated)),
        build.message ? el("div", { class: build.state === "Faulted" ? "error-text" : "sub" }, build.message) : "")
      : el("span", { class: "sub" }, "never built");
    const keys = engine.boundKeys || [];
    return el("tr", { "data-engine": engine.id },
      el("td", {}, engine.name ? el("strong", {}, engine.name) : "", engine.name ? el("br") : "", el("code", {}, engine.id)),
      el("td", {}, engine.owner),
      el("td", {}, engine.engineType),
      el("td", {}, `${engine.sourceLanguage} → ${engine.targetLanguage}`),
      el("td", { class: "num" }, engine.modelRevision ? engine.modelRevision : el("span", { class: "sub" }, "none"),
        engine.isBuilding ? el("div", { class: "sub" }, "building") : ""),
      el("td", {}, last),
      el("td", { class: "bound" }, keys.length
        ? el("ul", {}, keys.map((key) => el("li", { "data-key": key.id },
          el("code", {}, `${key.prefix}…`), " ", key.name || key.owner)))
        : el("span", { class: "sub" }, "none")));
  }));
}

async function loadBaseModels() {
  const { data } = await admin("GET", "/base-models");
  ui.noBaseModels.hidden = data.baseModels.length > 0;
  ui.baseModels.replaceChildren(...data.baseModels.map((model) =>
    el("tr", { "data-base-model": model.name },
      el("td", {}, el("strong", {}, model.name),
        model.isDefault ? [" ", badge("default", "default")] : "",
        model.isPublic ? [" ", badge("public", "public")] : ""),
      el("td", { class: "languages" }, model.allNllbLanguages
        ? `all NLLB languages (${model.languages.length})`
        : el("span", { title: model.languagesText }, model.languages.join(", ") || "none")),
      el("td", {}, bytes(model.sizeBytes)), el("td", {}, model.quantization || ""),
      el("td", {}, shortTime(model.createdAt)))));
  ui.baseModelProblems.replaceChildren(...(data.problems || []).map((problem) =>
    el("li", {}, `${problem.name}: ${problem.problem}`)));
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
ui.engineFilter.addEventListener("input", () => {
  state.engineFilter = ui.engineFilter.value;
  renderEngines();
});
setInterval(() => {
  for (const cell of document.querySelectorAll("[data-seen]")) cell.textContent = ago(cell.dataset.seen);
}, 1000);
ui.key.value = remembered(sessionStorage, KEY);
signIn();
