// The playground (`/`): a language pair and a text, translated through the public API a client
// uses: LibreTranslate's `/translate` with the public base model, or an engine's own
// `/api/v1/translation/engines/{id}/translate/{n}` (n-best, per-word confidence, alignment) and
// `translate-prefix` (interactive translation). docs/web-pages.md describes it.
//
// Made for a translator's morning: source and translation side by side, a new request clears the
// last result and an error takes its place (never an old translation under a new error), every
// error one sentence that says what to do (`forTranslator`), the engine, languages and "translate
// as I type" remembered in this browser, the text kept across a reload of the tab.
import {
  $, el, call, ApiError, curlCommand, answerText, remembered, remember, NOT_ANSWERING,
} from "./common.js";

const KEY = "serval.playground.key";
const PAIR = "serval.playground.pair";
const ENGINE = "serval.playground.engine";
const AUTO = "serval.playground.auto";
const TEXT = "serval.playground.text"; // in session storage: this tab only
const N_BEST = 4;
const ALTERNATIVES = 3;
// The engine types whose models complete a typed prefix: the family registry's, written into the page.
const INTERACTIVE_TYPES = new Set(
  (document.querySelector('meta[name="serval-interactive-types"]')?.getAttribute("content") || "").split(" "),
);
const PREFIX_DELAY_MS = 200;
const TYPING_DELAY_MS = 500; // LibreTranslate's `frontendTimeout`, unless the service says otherwise
const TYPE_NAMES = { nmt: "NMT", "smt-transfer": "SMT", echo: "Echo" };
const numbers = new Intl.NumberFormat("en");

const state = {
  key: "",
  languages: [], // {code: FLORES-200 code (or LibreTranslate's where unknown), libre, name, targets: Set of libre codes}
  engines: new Map(),
  charLimit: 0, // the deployment's limit for one text (LibreTranslate's `charLimit`); 0: unknown
  typingDelayMs: TYPING_DELAY_MS,
  engineLimits: new Map(), // engine id → the segment limit its refusals named
  segment: "", // what the last engine translation translated: the prefix completes it
  translation: "", // the translation on screen, as the service wrote it (what Copy copies)
  asked: "", // what the translation on screen (or in flight) was asked for: text, model and pair
  translateSeq: 0, // the latest request: an earlier one's late answer is dropped
  inflight: null, // its AbortController
  typingTimer: 0,
  prefixSeq: 0,
  prefixTimer: 0,
  keySeq: 0, // the latest "Use key": an earlier one's late answers are dropped
  copiedTimer: 0,
};

const ui = {
  key: $("#key"), model: $("#model"), engineInfo: $("#engine-info"), source: $("#source"),
  target: $("#target"), swap: $("#swap"), text: $("#text"), count: $("#count"), clear: $("#clear"),
  translate: $("#translate"), auto: $("#auto"), status: $("#status"), list: $("#languages"),
  targets: $("#targets"), output: $("#output"), placeholder: $("#placeholder"), problem: $("#problem"),
  copy: $("#copy"), revision: $("#revision"), details: $("#details"), sourceWords: $("#source-words"),
  translation: $("#translation"), alternatives: $("#alternatives"), wordsHelp: $("#words-help"),
  noWords: $("#no-words"), interactive: $("#interactive"), prefix: $("#prefix"),
  completion: $("#completion"), sample: $("#sample"), sampleRequest: $("#sample-request"),
  sampleResponse: $("#sample-response"),
};

function say(message, kind = "") {
  ui.status.textContent = message;
  ui.status.className = kind;
}

// ---- errors, in the translator's words ---------------------------------------------------------

const KEY_REFUSED = "The key is not accepted (wrong, revoked or expired): enter the key your administrator gave you.";
const NO_KEY = "Enter an API key first: your administrator gives you one.";

const count = (n) => numbers.format(n);

function tooLong(chars, limit) {
  return `The text is too long: ${count(chars)} characters, at most ${count(limit)}. Split it and translate each part.`;
}

function pairRefused(from, to) {
  return from && to
    ? `This model cannot translate ${from} into ${to}: choose another pair of languages.`
    : "This model cannot translate this pair of languages: choose another pair.";
}

// A message the service wrote for people (a capital, a full stop) rather than for a developer.
const isSentence = (text) => /^[A-Z][^{}\n]*[.!]$/.test(text) && !/^Invalid request/.test(text);

// What an error means for the person translating, in one sentence that says what to do. The
// service's own words are kept where they already are such a sentence; LibreTranslate's and the
// engine API's developer messages (`request (6200) exceeds text limit (5000)`, `the segment has
// 2100 characters; the limit is 2000`) are read by their status and wording.
// `context`: {chars, engine, from, to} of the request that failed.
function forTranslator(error, context = {}) {
  if (!(error instanceof ApiError)) return error instanceof Error ? error.message : String(error);
  const said = String(error.message || "");
  const { status } = error;
  if (status === 0) return `${NOT_ANSWERING}: check the connection, or try again in a minute.`;
  if (status === 401 || (status === 403 && /invalid api key/i.test(said))) return KEY_REFUSED;
  if (/get an api key/i.test(said)) return NO_KEY;
  const counted = /\((\d+)\) exceeds text limit \((\d+)\)/.exec(said) || /has (\d+) characters; the limit is (\d+)/.exec(said);
  const longer = /longer than (\d+) characters/.exec(said);
  if (counted || longer) {
    const limit = Number(counted ? counted[2] : longer[1]);
    learnLimit(context.engine, limit);
    return tooLong(counted ? Number(counted[1]) : context.chars || 0, limit);
  }
  if (/sentence is too long/i.test(said)) return said;
  if (status === 429) {
    const seconds = error.retryAfter ? Math.ceil(error.retryAfter) : null;
    const wait = seconds === null ? "a minute" : seconds === 1 ? "1 second" : `${seconds} seconds`;
    return `This key has translated as much as it may for now: wait ${wait} and try again.`;
  }
  if (status >= 400 && status < 500 && /not available as a target language|is not supported|not a language this service translates|language/i.test(said)) {
    // A pair the model does not know: the service's sentence where it wrote one for people.
    return isSentence(said) && !/not available as a target|is not supported$/.test(said)
      ? said
      : pairRefused(context.from, context.to);
  }
  if (status === 409) return "This engine has no finished build yet: choose another engine, or build it first.";
  if (status === 404) return "This engine no longer exists: press Use key to read the list again, then choose another.";
  if (status === 403) return "This key may not translate with this engine: ask your administrator for a key that may.";
  if (status === 503 || status === 504 || status === 502) {
    return isSentence(said) ? said : "The translation service is busy: try again in a minute.";
  }
  if (status >= 500) return `The service could not translate this (error ${status}): try again, and tell your administrator if it keeps failing.`;
  if (isSentence(said)) return said;
  return `The service refused this text (${said.replace(/^Invalid request:\s*/, "")}): change it and try again.`;
}

function learnLimit(engine, limit) {
  if (!limit) return;
  if (engine) state.engineLimits.set(engine.id, limit);
  else state.charLimit = limit;
  showCount();
}

// ---- languages and engines ----------------------------------------------------------------------

const label = (language) => `${language.name} (${language.code})`;

function findLanguage(value) {
  const text = value.trim();
  if (!text) return null;
  const coded = /\(([^()]+)\)\s*$/.exec(text);
  const wanted = (coded ? coded[1] : text).toLowerCase();
  return (
    state.languages.find((l) => l.code.toLowerCase() === wanted) ||
    state.languages.find((l) => l.libre.toLowerCase() === wanted) ||
    state.languages.find((l) => l.name.toLowerCase() === wanted) ||
    null
  );
}

// LibreTranslate's list names each language in English with the languages it translates into;
// SIL Converters' list gives the FLORES-200 codes of the same model in the same order: zipped,
// each name gets its FLORES code beside it.
async function loadLanguages(key) {
  const libre = await call("GET", "/languages", { key });
  let flores = null;
  if (key) {
    try {
      flores = (await call("GET", "/api/v1/translate/languages/", { key })).data;
    } catch {
      flores = null;
    }
  }
  const names = Array.isArray(libre.data) ? libre.data : [];
  const zipped = Array.isArray(flores) && flores.length === names.length;
  return names
    .map((l, i) => ({
      code: zipped ? flores[i] : l.code,
      libre: l.code,
      name: l.name,
      targets: new Set(Array.isArray(l.targets) ? l.targets : names.map((n) => n.code)),
    }))
    .sort((a, b) => a.name.localeCompare(b.name, "en") || a.code.localeCompare(b.code));
}

// LibreTranslate's settings for its own page: the character limit and the typing pause.
async function loadSettings() {
  try {
    const { data } = await call("GET", "/frontend/settings", { timeoutMs: 10000 });
    if (data && Number(data.charLimit) > 0) state.charLimit = Number(data.charLimit);
    if (data && Number(data.frontendTimeout) > 0) state.typingDelayMs = Math.max(300, Number(data.frontendTimeout));
  } catch {
    // the page works without them: no limit shown until a refusal names it
  }
}

async function loadEngines(key) {
  const engines = new Map();
  if (!key) return engines;
  try {
    const { data } = await call("GET", "/api/v1/translation/engines", { key });
    for (const engine of data) if (engine.modelRevision > 0) engines.set(engine.id, engine);
  } catch (error) {
    if (!(error instanceof ApiError) || error.status === 0 || error.status === 401) throw error;
    // 403: the key may translate but not list engines; it has the public base model
  }
  return engines;
}

function showLanguages(languages) {
  state.languages = languages;
  ui.list.replaceChildren(...languages.map((l) => el("option", { value: label(l) })));
  showTargets();
}

// The To list holds the languages the From language translates into.
function showTargets() {
  const from = findLanguage(ui.source.value);
  const targets = from ? state.languages.filter((l) => l !== from && from.targets.has(l.libre)) : state.languages;
  ui.targets.replaceChildren(...targets.map((l) => el("option", { value: label(l) })));
}

function languageName(tag) {
  const found = findLanguage(tag);
  if (found) return found.name;
  try {
    return new Intl.DisplayNames(["en"], { type: "language" }).of(tag) || tag;
  } catch {
    return tag;
  }
}

function engineLanguage(tag) {
  const found = findLanguage(tag);
  return found ? label(found) : tag;
}

function created(when) {
  if (!when) return "";
  const date = new Date(when);
  if (Number.isNaN(date.getTime())) return "";
  return `created ${date.toLocaleString("en", { dateStyle: "medium", timeStyle: "short" })}`;
}

// What a person reads for an engine: its name, else its type, pair and creation time; the id
// only beside it (the select's tooltip and the line under it).
function engineLabel(engine) {
  const pair = `${languageName(engine.sourceLanguage)} → ${languageName(engine.targetLanguage)}`;
  if (engine.name && engine.name.trim()) return `${engine.name.trim()} (${pair})`;
  const type = TYPE_NAMES[engine.type] || engine.type;
  return [`${type} engine, ${pair}`, created(engine.dateCreated)].filter(Boolean).join(", ");
}

function fillModels(problem = "") {
  const options = [];
  if (state.languages.length) {
    options.push(el("option", { value: "" }, `Public base model (${state.languages.length} languages)`));
  }
  const engines = [...state.engines.values()].sort((a, b) => engineLabel(a).localeCompare(engineLabel(b)));
  if (engines.length) {
    options.push(
      el("optgroup", { label: "Engines this key can use" },
        engines.map((e) => el("option", { value: e.id, title: `Engine id ${e.id}, revision ${e.modelRevision}` }, engineLabel(e)))),
    );
  }
  if (!options.length) {
    options.push(el("option", { value: "" }, problem || (state.key ? "Nothing to translate with" : "Enter an API key first")));
  }
  const chosen = ui.model.value || remembered(localStorage, ENGINE);
  ui.model.replaceChildren(...options);
  if (chosen && state.engines.has(chosen)) ui.model.value = chosen;
  ui.model.disabled = !state.languages.length && !engines.length;
  modelChanged({ quiet: true });
}

function defaultPair() {
  const [source, target] = remembered(localStorage, PAIR).split(">");
  const pick = (...codes) =>
    codes.map((c) => state.languages.find((l) => l.code === c || l.libre === c)).find(Boolean);
  const from = pick(source, "eng_Latn", "en") || state.languages[0];
  const to = pick(target, "swh_Latn", "sw", "fra_Latn", "fr") || state.languages.find((l) => l !== from);
  // A language already chosen stays, labelled anew: a list read without a key has LibreTranslate's
  // codes ("English (en)"), one read with a key the FLORES codes ("English (eng_Latn)").
  for (const [input, fallback] of [[ui.source, from], [ui.target, to]]) {
    const chosen = findLanguage(input.value) || fallback;
    if (chosen) input.value = label(chosen);
  }
}

function selectedEngine() {
  return state.engines.get(ui.model.value) || null;
}

function modelChanged({ quiet = false } = {}) {
  const engine = selectedEngine();
  for (const input of [ui.source, ui.target]) input.disabled = Boolean(engine);
  ui.swap.disabled = Boolean(engine);
  if (engine) {
    ui.source.value = engineLanguage(engine.sourceLanguage);
    ui.target.value = engineLanguage(engine.targetLanguage);
    ui.engineInfo.textContent = `Engine id ${engine.id} · ${engine.type} · revision ${engine.modelRevision}`;
  } else {
    defaultPair();
    ui.engineInfo.textContent = "";
  }
  ui.engineInfo.hidden = !engine;
  showTargets();
  showCount();
  if (!quiet) {
    remember(localStorage, ENGINE, engine ? engine.id : "");
    settingsChanged();
  }
}

async function useKey() {
  const key = ui.key.value.trim();
  const seq = ++state.keySeq;
  state.key = key;
  remember(localStorage, KEY, key);
  say(key ? "Reading what this key can use…" : "Reading the public languages…", "busy");
  try {
    const [languages, engines] = await Promise.all([loadLanguages(key), loadEngines(key), loadSettings()]);
    if (seq !== state.keySeq) return; // another key was entered since
    showLanguages(languages);
    state.engines = engines;
    fillModels();
    const count = engines.size;
    say(key
      ? `${languages.length} languages${count ? `, ${count} engine${count > 1 ? "s" : ""}` : ""}.`
      : "Enter an API key to translate.");
  } catch (error) {
    if (seq !== state.keySeq) return;
    state.engines = new Map();
    const message = forTranslator(error);
    fillModels(message === KEY_REFUSED ? "Key not accepted" : "");
    say(message, "error");
  }
}

function rememberPair() {
  const from = findLanguage(ui.source.value);
  const to = findLanguage(ui.target.value);
  if (from && to) remember(localStorage, PAIR, `${from.code}>${to.code}`);
}

// Swap the languages; a translation on screen becomes the text to translate back.
function swap() {
  const from = ui.source.value;
  ui.source.value = ui.target.value;
  ui.target.value = from;
  rememberPair();
  showTargets();
  if (state.translation && ui.output.dataset.state === "done") {
    ui.text.value = state.translation;
    textChanged();
  }
  clearResult("empty");
  settingsChanged();
}

// ---- the text, its count, and the result -----------------------------------------------------

function currentLimit() {
  const engine = selectedEngine();
  return engine ? state.engineLimits.get(engine.id) || 0 : state.charLimit;
}

function showCount() {
  const chars = ui.text.value.length;
  const limit = currentLimit();
  const over = limit > 0 && chars > limit;
  ui.count.textContent = limit
    ? `${count(chars)} / ${count(limit)} characters${over ? ": too long, split it" : ""}`
    : `${count(chars)} character${chars === 1 ? "" : "s"}`;
  ui.count.classList.toggle("over", over);
}

function textChanged() {
  showCount();
  remember(sessionStorage, TEXT, ui.text.value);
  const shown = ui.output.dataset.state;
  if ((shown === "done" || shown === "error") && request().signature !== state.asked) ui.output.dataset.state = "stale";
  if (ui.auto.checked) {
    clearTimeout(state.typingTimer);
    state.typingTimer = setTimeout(() => translate({ typed: true }), state.typingDelayMs);
  }
}

// A language or model changed: the result on screen no longer answers what is asked.
function settingsChanged() {
  if (ui.output.dataset.state === "done" && request().signature !== state.asked) ui.output.dataset.state = "stale";
  if (ui.auto.checked && ui.text.value.trim()) translate({ typed: true });
}

// Clear what the last request showed: a new request, or an error, never leaves it on screen.
function clearResult(shown) {
  state.translation = "";
  state.segment = "";
  state.prefixSeq += 1;
  ui.translation.replaceChildren();
  ui.sourceWords.replaceChildren();
  ui.sourceWords.hidden = true;
  ui.alternatives.replaceChildren();
  ui.details.hidden = true;
  ui.wordsHelp.hidden = true;
  ui.noWords.hidden = true;
  ui.interactive.hidden = true;
  ui.problem.hidden = true;
  ui.problem.textContent = "";
  ui.problem.removeAttribute("title");
  ui.revision.textContent = "";
  ui.copy.disabled = true;
  ui.output.dataset.state = shown;
  ui.output.setAttribute("aria-busy", String(shown === "loading"));
  ui.placeholder.textContent = shown === "loading" ? "Translating…" : "The translation appears here.";
  ui.translate.classList.toggle("busy", shown === "loading");
}

function showProblem(message, detail = "") {
  clearResult("error");
  ui.problem.textContent = message;
  if (detail && detail !== message) ui.problem.title = `The service said: ${detail}`;
  ui.problem.hidden = false;
}

// What the page is asked to translate now, and a signature to tell whether a result answers it.
function request() {
  const engine = selectedEngine();
  const from = engine ? null : findLanguage(ui.source.value);
  const to = engine ? null : findLanguage(ui.target.value);
  const text = ui.text.value;
  const signature = JSON.stringify([text, engine ? engine.id : "", from && from.code, to && to.code]);
  return { engine, from, to, text, signature };
}

function showSample(method, path, body, response, data) {
  ui.sampleRequest.textContent = curlCommand(method, path, body);
  ui.sampleResponse.textContent = answerText(response, data);
  ui.sample.hidden = false;
}

async function translate({ typed = false } = {}) {
  clearTimeout(state.typingTimer);
  const asked = request();
  const { engine, from, to, text } = asked;
  if (typed && asked.signature === state.asked && ui.output.dataset.state !== "stale") return; // already shown or on its way
  state.inflight?.abort();
  state.inflight = null;
  state.asked = asked.signature;
  const seq = ++state.translateSeq;
  if (!text.trim()) {
    if (typed) clearResult("empty");
    else showProblem("Type or paste a text to translate.");
    return;
  }
  if (!state.key) return showProblem(NO_KEY);
  if (!engine) {
    const unknown = [[from, ui.source], [to, ui.target]].find(([found]) => !found);
    if (unknown) {
      const typedName = unknown[1].value.trim();
      return showProblem(typedName
        ? `This model does not know “${typedName}”: choose a language from the list.`
        : "Choose both languages from the list.");
    }
    if (from === to) return showProblem("The two languages are the same: choose another language to translate into.");
    if (!from.targets.has(to.libre)) return showProblem(pairRefused(from.name, to.name));
    rememberPair();
  }
  const controller = new AbortController();
  state.inflight = controller;
  clearResult("loading");
  say("Translating…", "busy");
  const started = performance.now();
  const context = { chars: text.length, engine, from: from && from.name, to: to && to.name };
  try {
    const shown = engine
      ? await translateWithEngine(engine, text, controller.signal)
      : await translateWithBaseModel(text, from, to, controller.signal);
    if (seq !== state.translateSeq) return;
    shown();
    ui.output.dataset.state = "done";
    ui.output.setAttribute("aria-busy", "false");
    ui.translate.classList.remove("busy");
    ui.copy.disabled = !state.translation;
    say(`Translated in ${Math.round(performance.now() - started)} ms.`);
  } catch (error) {
    if (seq !== state.translateSeq || controller.signal.aborted) return; // a newer request took over
    showProblem(forTranslator(error, context), error instanceof ApiError ? error.message : "");
    say("");
    if (error instanceof ApiError && error.data !== null && error.status) {
      ui.sampleResponse.textContent = `HTTP ${error.status}\n\n${JSON.stringify(error.data, null, 2)}`;
    }
  } finally {
    if (state.inflight === controller) state.inflight = null;
  }
}

// Each returns a function that shows the answer: it runs only if no newer request was made.
async function translateWithBaseModel(text, from, to, signal) {
  const body = { q: text, source: from.code, target: to.code, format: "text", alternatives: ALTERNATIVES };
  ui.sampleRequest.textContent = curlCommand("POST", "/translate", body);
  const { data, response } = await call("POST", "/translate", { key: state.key, body, signal });
  return () => {
    showSample("POST", "/translate", body, response, data);
    state.translation = String(data.translatedText ?? "");
    ui.translation.replaceChildren(state.translation);
    const alternatives = data.alternatives || [];
    ui.alternatives.replaceChildren(...alternatives.map((a) => el("li", { dir: "auto" }, a)));
    if (!alternatives.length) ui.alternatives.append(el("li", { class: "hint" }, "none"));
    ui.noWords.hidden = false;
    ui.details.hidden = false;
  };
}

async function translateWithEngine(engine, text, signal) {
  const path = `/api/v1/translation/engines/${encodeURIComponent(engine.id)}/translate/${N_BEST}`;
  ui.sampleRequest.textContent = curlCommand("POST", path, text);
  const { data, response } = await call("POST", path, { key: state.key, body: text, signal });
  return () => {
    showSample("POST", path, text, response, data);
    const [best, ...others] = data;
    state.segment = text;
    state.translation = best.translation;
    ui.revision.textContent = `revision ${response.headers.get("x-model-revision") || engine.modelRevision}`;
    showWords(best, text);
    ui.alternatives.replaceChildren(
      ...others.map((r) =>
        el("li", {}, el("span", { dir: "auto" }, r.translation), " ",
          el("span", { class: "sub" }, `mean confidence ${mean(r.confidences).toFixed(2)}`))),
    );
    if (!others.length) ui.alternatives.append(el("li", { class: "hint" }, "none: the model found no other translation"));
    ui.details.hidden = false;
    if (INTERACTIVE_TYPES.has(engine.type)) {
      ui.interactive.hidden = false;
      ui.prefix.value = "";
      showCompletion("", best.translation);
    }
  };
}

function mean(values) {
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0;
}

// Copy the translation: the Clipboard API where the page is a secure context (https, or this
// machine), else the older copy command, which also works over plain http on the office network.
async function copyTranslation() {
  const text = state.translation;
  if (!text) return;
  let copied = false;
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      copied = true;
    } catch {
      copied = false;
    }
  }
  if (!copied) {
    const scratch = el("textarea", { class: "visually-hidden", readonly: true });
    scratch.value = text;
    document.body.append(scratch);
    scratch.select();
    try {
      copied = document.execCommand("copy");
    } catch {
      copied = false;
    }
    scratch.remove();
  }
  ui.copy.textContent = copied ? "Copied" : "Select and copy it yourself";
  say(copied ? "The translation is on the clipboard." : "This browser did not let the page copy: select the translation and copy it.", copied ? "" : "error");
  clearTimeout(state.copiedTimer);
  state.copiedTimer = setTimeout(() => {
    ui.copy.textContent = "Copy";
  }, 2000);
}

// ---- confidences and alignment ------------------------------------------------------------------

// Each token as a span inside the text it came from (tokens are substrings, in order); where a
// token cannot be found, the tokens are shown joined by spaces instead.
function wordSpans(text, tokens, make) {
  const parts = [];
  let at = 0;
  for (let i = 0; i < tokens.length; i += 1) {
    const found = text.indexOf(tokens[i], at);
    if (found < 0) return tokens.flatMap((t, j) => (j ? [" ", make(t, j)] : [make(t, j)]));
    if (found > at) parts.push(text.slice(at, found));
    parts.push(make(tokens[i], i));
    at = found + tokens[i].length;
  }
  if (at < text.length) parts.push(text.slice(at));
  return parts;
}

function showWords(result, text) {
  const toSource = new Map();
  const toTarget = new Map();
  for (const pair of result.alignment) {
    if (!toSource.has(pair.targetIndex)) toSource.set(pair.targetIndex, []);
    if (!toTarget.has(pair.sourceIndex)) toTarget.set(pair.sourceIndex, []);
    toSource.get(pair.targetIndex).push(pair.sourceIndex);
    toTarget.get(pair.sourceIndex).push(pair.targetIndex);
  }
  const light = (from, to, links, index, on) => {
    from.querySelector(`[data-index="${index}"]`)?.classList.toggle("active", on);
    for (const other of links.get(index) || []) {
      to.querySelector(`[data-index="${other}"]`)?.classList.toggle("linked", on);
    }
  };
  const word = (kind, links, from, to) => (token, index) => {
    const attributes = { class: "word", "data-index": index, tabindex: 0 };
    if (kind === "target") {
      const confidence = result.confidences[index] ?? 0;
      attributes.class += ` conf-${Math.min(4, Math.floor((1 - confidence) * 5))}`;
      attributes["data-confidence"] = confidence.toFixed(3);
      attributes.title = `confidence ${confidence.toFixed(2)}`;
    }
    const span = el("span", attributes, token);
    for (const [event, on] of [["mouseenter", true], ["mouseleave", false], ["focus", true], ["blur", false]]) {
      span.addEventListener(event, () => light(from(), to(), links, index, on));
    }
    return span;
  };
  const source = () => ui.sourceWords;
  const target = () => ui.translation;
  ui.sourceWords.replaceChildren(...wordSpans(text, result.sourceTokens, word("source", toTarget, source, target)));
  ui.translation.replaceChildren(...wordSpans(result.translation, result.targetTokens, word("target", toSource, target, source)));
  ui.sourceWords.hidden = false;
  ui.wordsHelp.hidden = false;
  ui.noWords.hidden = true;
}

// ---- interactive translation --------------------------------------------------------------------

// The engine keeps the typed words but may join them to what follows its own way ("word " +
// ", …" is "word, …"): the completion is what follows the typed text, or its trimmed text.
function showCompletion(typed, translation) {
  let rest = "";
  let full = typed;
  if (translation.startsWith(typed)) {
    rest = translation.slice(typed.length);
    full = translation;
  } else if (typed.trimEnd() && translation.startsWith(typed.trimEnd())) {
    rest = translation.slice(typed.trimEnd().length).trimStart();
    full = translation;
  }
  ui.completion.querySelector(".typed").textContent = typed;
  ui.completion.querySelector(".suggested").textContent = rest;
  ui.completion.dataset.full = full;
}

async function complete() {
  const engine = selectedEngine();
  if (!engine || !state.segment) return;
  const prefix = ui.prefix.value;
  const seq = ++state.prefixSeq;
  const path = `/api/v1/translation/engines/${encodeURIComponent(engine.id)}/translate-prefix`;
  const body = { segment: state.segment, prefix, n: 1 };
  try {
    const { data, response } = await call("POST", path, { key: state.key, body });
    if (seq !== state.prefixSeq) return; // typed on since: a newer answer is coming
    showSample("POST", path, body, response, data);
    showCompletion(prefix, data[0] ? data[0].translation : prefix);
    say("Completed.");
  } catch (error) {
    if (seq === state.prefixSeq) say(forTranslator(error, { chars: prefix.length, engine }), "error");
  }
}

function prefixTyped() {
  clearTimeout(state.prefixTimer);
  state.prefixTimer = setTimeout(complete, PREFIX_DELAY_MS);
}

function prefixKey(event) {
  const full = ui.completion.dataset.full || "";
  if (event.key === "Tab" && !event.shiftKey && full && full !== ui.prefix.value) {
    event.preventDefault();
    ui.prefix.value = full;
    showCompletion(full, full);
  }
}

// ---- wiring ---------------------------------------------------------------------------------------

ui.key.value = remembered(localStorage, KEY);
ui.text.value = remembered(sessionStorage, TEXT);
ui.auto.checked = remembered(localStorage, AUTO) === "on";
ui.key.addEventListener("keydown", (event) => {
  if (event.key === "Enter") useKey();
});
$("#use-key").addEventListener("click", useKey);
$("#forget-key").addEventListener("click", () => {
  ui.key.value = "";
  useKey();
});
ui.model.addEventListener("change", () => modelChanged());
ui.swap.addEventListener("click", swap);
for (const input of [ui.source, ui.target]) {
  input.addEventListener("change", () => {
    rememberPair();
    if (input === ui.source) showTargets();
    settingsChanged();
  });
}
ui.text.addEventListener("input", textChanged);
ui.clear.addEventListener("click", () => {
  ui.text.value = "";
  textChanged();
  state.asked = "";
  clearResult("empty");
  ui.text.focus();
});
ui.copy.addEventListener("click", copyTranslation);
ui.auto.addEventListener("change", () => {
  remember(localStorage, AUTO, ui.auto.checked ? "on" : "");
  if (ui.auto.checked && ui.text.value.trim()) translate({ typed: true });
});
ui.translate.addEventListener("click", () => translate());
// Ctrl+Enter (⌘+Enter) translates from anywhere on the page.
document.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && !event.isComposing) {
    event.preventDefault();
    translate();
  }
});
ui.prefix.addEventListener("input", prefixTyped);
ui.prefix.addEventListener("keydown", prefixKey);
showCount();
useKey();
