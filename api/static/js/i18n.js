// Translations: one JSON catalogue per language under /ui/i18n/. The language follows the browser
// (navigator.languages) until the user picks one with the switch; the choice is kept in this browser.
// Catalogue values may hold `code` spans (backticks) and {name} parameters; they are rendered as
// text nodes and <code> elements, never as HTML.

export const LANGUAGES = ["en", "zh-CN"];
const LANG_KEY = "onnx-reducer.lang";
let catalogue = {};
let fallback = {};
let current = "en";

export function detectLanguage() {
  const stored = localStorage.getItem(LANG_KEY);
  if (LANGUAGES.includes(stored)) return stored;
  const wanted = navigator.languages && navigator.languages.length ? navigator.languages : [navigator.language || "en"];
  for (const tag of wanted) {
    const lower = String(tag).toLowerCase();
    if (lower.startsWith("zh")) return "zh-CN";
    if (lower.startsWith("en")) return "en";
  }
  return "en";
}

async function fetchCatalogue(lang) {
  const response = await fetch(`/ui/i18n/${lang}.json`, { cache: "no-cache", credentials: "omit" });
  if (!response.ok) throw new Error(`catalogue ${lang}: HTTP ${response.status}`);
  return response.json();
}

export async function setLanguage(lang, remember = false) {
  if (!LANGUAGES.includes(lang)) lang = "en";
  if (remember) localStorage.setItem(LANG_KEY, lang);
  if (!Object.keys(fallback).length) fallback = await fetchCatalogue("en");
  catalogue = lang === "en" ? fallback : await fetchCatalogue(lang);
  current = lang;
  document.documentElement.lang = lang;
  translatePage(document);
}

export const language = () => current;

/** The text of `key` with {name} parameters filled in. `n` picks the `key.one` form in English. */
export function t(key, params = {}) {
  let text;
  if (params.n === 1 && (catalogue[`${key}.one`] ?? fallback[`${key}.one`]) !== undefined) {
    text = catalogue[`${key}.one`] ?? fallback[`${key}.one`];
  } else {
    text = catalogue[key] ?? fallback[key];
  }
  if (text === undefined) {
    console.warn(`missing translation: ${key}`);
    return key;
  }
  return text.replace(/\{(\w+)\}/g, (whole, name) => (name in params ? String(params[name]) : whole));
}

/** Fill `element` with text where `code` spans become <code> elements. */
export function setRich(element, text) {
  const parts = text.split("`");
  element.replaceChildren(
    ...parts.map((part, i) => {
      if (i % 2 === 0) return document.createTextNode(part);
      const code = document.createElement("code");
      code.textContent = part;
      return code;
    }),
  );
}

/** Translate every [data-i18n] element (its content) and [data-i18n-attr] ("attr=key,attr=key"). */
export function translatePage(root) {
  for (const element of root.querySelectorAll("[data-i18n]")) {
    setRich(element, t(element.dataset.i18n));
  }
  for (const element of root.querySelectorAll("[data-i18n-attr]")) {
    for (const pair of element.dataset.i18nAttr.split(",")) {
      const [attr, key] = pair.split("=");
      element.setAttribute(attr.trim(), t(key.trim()).replaceAll("`", ""));
    }
  }
}

/** Numbers and dates in the page's language. */
export function formatDate(iso) {
  return iso ? new Date(iso).toLocaleString(current) : "–";
}

export function formatNumber(value, digits = 0) {
  return Number(value).toLocaleString(current, { maximumFractionDigits: digits, minimumFractionDigits: digits });
}
