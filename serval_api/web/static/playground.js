// The playground (`/`): a language pair and a text, translated through the public API a client
// uses: LibreTranslate's `/translate` with the public base model, or an engine's own
// `/api/v1/translation/engines/{id}/translate/{n}` (n-best, per-word confidence, alignment) and
// `translate-prefix` (interactive translation). docs/web-pages.md describes it.
import {
  $, el, call, ApiError, curlCommand, answerText, remembered, remember,
} from "./common.js";

const KEY = "serval.playground.key";
const PAIR = "serval.playground.pair";
const N_BEST = 4;
const ALTERNATIVES = 3;
// The engine types whose models complete a typed prefix: the family registry's, written into the page.
const INTERACTIVE_TYPES = new Set(
  (document.querySelector('meta[name="serval-interactive-types"]')?.getAttribute("content") || "").split(" "),
);
const PREFIX_DELAY_MS = 200;

const state = {
  key: "",
  languages: [], // {code: FLORES-200 code (or LibreTranslate's where unknown), libre, name}
  engines: new Map(),
  segment: "", // what the last engine translation translated: the prefix completes it
  prefixSeq: 0,
  prefixTimer: 0,
  keySeq: 0, // the latest "Use key": an earlier one's late answers are dropped
};

const ui = {
  key: $("#key"), model: $("#model"), source: $("#source"), target: $("#target"),
  swap: $("#swap"), text: $("#text"), translate: $("#translate"), status: $("#status"),
  list: $("#languages"), answer: $("#answer"), revision: $("#revision"),
  sourceWords: $("#source-words"), translation: $("#translation"), alternatives: $("#alternatives"),
  wordsHelp: $("#words-help"), noWords: $("#no-words"), interactive: $("#interactive"),
  prefix: $("#prefix"), completion: $("#completion"), sample: $("#sample"),
  sampleRequest: $("#sample-request"), sampleResponse: $("#sample-response"),
};

function say(message, kind = "") {
  ui.status.textContent = message;
  ui.status.className = kind;
}

function failure(error) {
  if (!(error instanceof ApiError)) return String(error);
  if (error.status === 401) return "The key is not accepted (missing, wrong, revoked or expired).";
  return error.message;
}

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

// LibreTranslate's list names each language in English; SIL Converters' list gives the FLORES-200
// codes of the same model in the same order: zipped, each name gets its FLORES code beside it.
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
    .map((l, i) => ({ code: zipped ? flores[i] : l.code, libre: l.code, name: l.name }))
    .sort((a, b) => a.name.localeCompare(b.name, "en") || a.code.localeCompare(b.code));
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
}

function engineLanguage(tag) {
  const found = findLanguage(tag);
  return found ? label(found) : tag;
}

function fillModels() {
  const options = [];
  if (state.languages.length) {
    options.push(el("option", { value: "" }, `Public base model (${state.languages.length} languages)`));
  }
  const engines = [...state.engines.values()];
  if (engines.length) {
    options.push(
      el("optgroup", { label: "Engines this key can use" },
        engines.map((e) =>
          el("option", { value: e.id },
            `${e.name || e.id} — ${e.sourceLanguage} → ${e.targetLanguage} (${e.type}, revision ${e.modelRevision})`))),
    );
  }
  if (!options.length) options.push(el("option", { value: "" }, state.key ? "Nothing to translate with" : "Enter an API key first"));
  const chosen = ui.model.value;
  ui.model.replaceChildren(...options);
  if (chosen && state.engines.has(chosen)) ui.model.value = chosen;
  ui.model.disabled = !state.languages.length && !engines.length;
  modelChanged();
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

function modelChanged() {
  const engine = selectedEngine();
  for (const input of [ui.source, ui.target]) input.disabled = Boolean(engine);
  ui.swap.disabled = Boolean(engine);
  if (engine) {
    ui.source.value = engineLanguage(engine.sourceLanguage);
    ui.target.value = engineLanguage(engine.targetLanguage);
  } else {
    defaultPair();
  }
  ui.interactive.hidden = true;
}

async function useKey() {
  const key = ui.key.value.trim();
  const seq = ++state.keySeq;
  state.key = key;
  remember(localStorage, KEY, key);
  say(key ? "Reading what this key can use…" : "Reading the public languages…");
  try {
    const [languages, engines] = await Promise.all([loadLanguages(key), loadEngines(key)]);
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
    fillModels();
    say(failure(error), "error");
  }
}

function swap() {
  const from = ui.source.value;
  ui.source.value = ui.target.value;
  ui.target.value = from;
  rememberPair();
}

function rememberPair() {
  const from = findLanguage(ui.source.value);
  const to = findLanguage(ui.target.value);
  if (from && to) remember(localStorage, PAIR, `${from.code}>${to.code}`);
}

function showSample(method, path, body, response, data) {
  ui.sampleRequest.textContent = curlCommand(method, path, body);
  ui.sampleResponse.textContent = answerText(response, data);
  ui.sample.hidden = false;
}

async function translate() {
  const text = ui.text.value;
  if (!text.trim()) {
    say("Type a text to translate.", "error");
    return;
  }
  if (!state.key) {
    say("Enter an API key first.", "error");
    return;
  }
  const engine = selectedEngine();
  ui.translate.disabled = true;
  say("Translating…");
  const started = performance.now();
  try {
    if (engine) await translateWithEngine(engine, text);
    else await translateWithBaseModel(text);
    say(`Translated in ${Math.round(performance.now() - started)} ms.`);
  } catch (error) {
    say(failure(error), "error");
    if (error instanceof ApiError && error.data !== null && error.status) {
      ui.sampleResponse.textContent = `HTTP ${error.status}\n\n${JSON.stringify(error.data, null, 2)}`;
    }
  } finally {
    ui.translate.disabled = false;
  }
}

async function translateWithBaseModel(text) {
  const from = findLanguage(ui.source.value);
  const to = findLanguage(ui.target.value);
  if (!from || !to) throw new Error("Choose both languages from the list.");
  rememberPair();
  const body = { q: text, source: from.code, target: to.code, format: "text", alternatives: ALTERNATIVES };
  const { data, response } = await call("POST", "/translate", { key: state.key, body });
  showSample("POST", "/translate", body, response, data);
  ui.revision.textContent = "";
  ui.sourceWords.hidden = true;
  ui.wordsHelp.hidden = true;
  ui.noWords.hidden = false;
  ui.translation.replaceChildren(data.translatedText);
  ui.alternatives.replaceChildren(...(data.alternatives || []).map((a) => el("li", { dir: "auto" }, a)));
  if (!(data.alternatives || []).length) ui.alternatives.append(el("li", { class: "hint" }, "none"));
  ui.interactive.hidden = true;
  ui.answer.hidden = false;
}

async function translateWithEngine(engine, text) {
  const path = `/api/v1/translation/engines/${encodeURIComponent(engine.id)}/translate/${N_BEST}`;
  const { data, response } = await call("POST", path, { key: state.key, body: text });
  showSample("POST", path, text, response, data);
  const [best, ...others] = data;
  state.segment = text;
  ui.revision.textContent = `revision ${response.headers.get("x-model-revision") || engine.modelRevision}`;
  showWords(best, text);
  ui.alternatives.replaceChildren(
    ...others.map((r) =>
      el("li", {}, el("span", { dir: "auto" }, r.translation), " ",
        el("span", { class: "sub" }, `mean confidence ${mean(r.confidences).toFixed(2)}`))),
  );
  if (!others.length) ui.alternatives.append(el("li", { class: "hint" }, "none: the model found no other translation"));
  ui.answer.hidden = false;
  if (INTERACTIVE_TYPES.has(engine.type)) {
    ui.interactive.hidden = false;
    ui.prefix.value = "";
    showCompletion("", best.translation);
  } else {
    ui.interactive.hidden = true;
  }
}

function mean(values) {
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0;
}

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
    if (seq === state.prefixSeq) say(failure(error), "error");
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

ui.key.value = remembered(localStorage, KEY);
ui.key.addEventListener("keydown", (event) => {
  if (event.key === "Enter") useKey();
});
$("#use-key").addEventListener("click", useKey);
$("#forget-key").addEventListener("click", () => {
  ui.key.value = "";
  useKey();
});
ui.model.addEventListener("change", modelChanged);
ui.swap.addEventListener("click", swap);
ui.source.addEventListener("change", rememberPair);
ui.target.addEventListener("change", rememberPair);
ui.translate.addEventListener("click", translate);
ui.text.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
});
ui.prefix.addEventListener("input", prefixTyped);
ui.prefix.addEventListener("keydown", prefixKey);
useKey();
