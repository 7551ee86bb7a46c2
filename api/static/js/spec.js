// The new-job form's check section: the fields of each check kind, turned into the YAML check
// spec that the server parses (docs/check-specs.md), and a server message such as
// "tolerance.atol: must be a number >= 0" mapped back to the form field it names.

const $ = (id) => document.getElementById(id);

const PRECISIONS = {
  onnxruntime: ["fp32", "fp16"],
  tensorrt: ["fp32", "fp16", "bf16", "int8"],
};

/** A YAML scalar: numbers as numbers, everything else as a JSON string (valid YAML). */
function scalar(value) {
  const text = String(value).trim();
  if (/^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) return text;
  return JSON.stringify(text);
}

const flow = (entries) => `{${entries.map(([k, v]) => `${k}: ${v}`).join(", ")}}`;
const list = (items) => `[${items.map((i) => JSON.stringify(i)).join(", ")}]`;
const splitList = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);

function runtime(prefix) {
  const name = $(`${prefix}-runtime`).value;
  const entries = [["runtime", name], ["precision", $(`${prefix}-precision`).value]];
  if (name === "onnxruntime") {
    const optimization = $(`${prefix}-optimization`).value;
    if (optimization !== "all") entries.push(["optimization", optimization]);
    const provider = $(`${prefix}-provider`).value.trim();
    if (provider) entries.push(["provider", scalar(provider)]);
  }
  return flow(entries);
}

/** The spec text for the form's current values. */
export function specFromForm() {
  const kind = $("check-kind").value;
  if (kind === "interactive") return "kind: interactive\n"; // a person gives the verdicts: no other field
  const lines = [`kind: ${kind}`];
  if (kind === "compare") lines.push(`reference: ${runtime("ref")}`);
  if (["compare", "golden", "error"].includes(kind)) lines.push(`target: ${runtime("target")}`);
  if (["compare", "golden"].includes(kind)) {
    lines.push(`tolerance: ${flow([["atol", scalar($("atol").value)], ["rtol", scalar($("rtol").value)]])}`);
  }
  if (kind === "error" && $("match").value.trim()) lines.push(`match: ${JSON.stringify($("match").value.trim())}`);
  if (kind === "op-present") {
    const ops = splitList($("ops").value);
    const names = splitList($("names").value);
    if (ops.length || !names.length) lines.push(`ops: ${list(ops)}`);
    if (names.length) lines.push(`names: ${list(names)}`);
  }
  if (kind === "command") {
    const args = $("command").value.split("\n").map((s) => s.trim()).filter(Boolean);
    lines.push(`command: ${list(args)}`);
    const regex = $("fail-regex").value.trim();
    if (regex) lines.push(`fail_regex: ${list([regex])}`);
  }
  const timeout = $("timeout").value.trim();
  if (timeout) lines.push(`timeout: ${scalar(timeout)}`);
  const repeat = $("repeat").value.trim();
  if (repeat && repeat !== "1") {
    lines.push(`repeat: ${scalar(repeat)}`);
    lines.push(`fail_if: ${$("fail-if").value}`);
  }
  return `${lines.join("\n")}\n`;
}

/** Show only the fields of the chosen kind; precision choices follow each runtime. */
export function syncCheckForm() {
  const kind = $("check-kind").value;
  for (const element of document.querySelectorAll("#check-form [data-kinds]")) {
    element.hidden = !element.dataset.kinds.split(" ").includes(kind);
  }
  for (const select of document.querySelectorAll("#check-form select.runtime")) {
    const precision = $(select.dataset.precision);
    const wanted = PRECISIONS[select.value] || PRECISIONS.onnxruntime;
    const before = precision.value;
    if ([...precision.options].map((o) => o.value).join() !== wanted.join()) {
      precision.replaceChildren(...wanted.map((value) => new Option(value, value)));
    }
    precision.value = wanted.includes(before) ? before : wanted[0];
    $(select.dataset.ort).hidden = select.value !== "onnxruntime";
  }
  $("spec-preview").textContent = specFromForm();
}

/** Defaults that make each kind a sensible first job (fp16 against fp32 for compare). */
export function initCheckForm() {
  syncCheckForm();
  $("target-precision").value = "fp16";
  $("check-kind").value = "op-present";
  syncCheckForm();
}

const SPEC_FIELDS = [
  [/^tolerance\.atol|^tolerance$/, "atol"],
  [/^tolerance\.rtol/, "rtol"],
  [/^reference\.runtime|^reference$/, "ref-runtime"],
  [/^reference\.precision/, "ref-precision"],
  [/^reference\.optimization/, "ref-optimization"],
  [/^reference\.provider/, "ref-provider"],
  [/^target\.runtime|^target$/, "target-runtime"],
  [/^target\.precision/, "target-precision"],
  [/^target\.optimization/, "target-optimization"],
  [/^target\.provider/, "target-provider"],
  [/^match/, "match"],
  [/^ops|^names/, "ops"],
  [/^command/, "command"],
  [/^fail_regex/, "fail-regex"],
  [/^timeout/, "timeout"],
  [/^repeat/, "repeat"],
  [/^fail_if/, "fail-if"],
  [/^kind/, "kind"],
];

/** The form element id for a check-spec message ("tolerance.atol: ..."), or null. */
export function specFieldOf(message) {
  const path = String(message).split(":")[0].trim();
  for (const [pattern, id] of SPEC_FIELDS) if (pattern.test(path)) return id;
  return null;
}
