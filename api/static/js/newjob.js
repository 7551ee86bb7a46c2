// The new-job form: a drop zone around the model's file input, the check as a form or a pasted
// spec, mode and options; the upload goes through XMLHttpRequest for its progress bar, and every
// server problem is shown next to the field it names.

import { ApiError, randomKey, upload } from "./api.js";
import { setRich, t } from "./i18n.js";
import { initCheckForm, specFieldOf, specFromForm, syncCheckForm } from "./spec.js";
import { $, clearError, formatBytes, session, setState, showError, signInHint } from "./ui.js";

const form = { file: null, busy: false };
const OPTION_FIELDS = ["reduce_inputs", "reduce_outputs", "pin_signature", "confirm_flaky", "reduce_data"];

const specSource = () => ($("spec-source-yaml").checked ? "yaml" : "form");

export function openNew() {
  const hint = signInHint();
  setState($("new-state"), hint);
  $("submit-job").disabled = Boolean(hint) || form.busy;
  const allowed = Boolean(session.server && session.server.allow_command_checks);
  const command = $("check-kind").querySelector('option[value="command"]');
  command.disabled = !allowed;
  if (!allowed && $("check-kind").value === "command") $("check-kind").value = "op-present";
  setRich($("kind-help"), allowed ? "" : t("new.command.disabled"));
  $("mode-help").textContent = "";
  showModel();
  showGolden();
  syncCheckForm();
}

function showModel() {
  const file = form.file;
  $("model-chosen").textContent = file ? t("new.model.chosen", { name: file.name, size: formatBytes(file.size) }) : "";
  $("drop-zone").classList.toggle("has-file", Boolean(file));
}

function chooseFile(file) {
  form.file = file || null;
  clearFieldError("model");
  showModel();
}

function errorElement(field) {
  return $(`${field}-error`);
}

function inputOf(field) {
  const ids = { model: "model", model_path: "model-path", golden: "golden", mode: "mode", kind: "check-kind" };
  return $(ids[field] || field) || (field === "check_spec" ? $("check-spec") : null);
}

function showFieldError(field, message) {
  const element = errorElement(field);
  if (!element) return false;
  element.textContent = message;
  element.hidden = false;
  const input = inputOf(field);
  if (input) input.setAttribute("aria-invalid", "true");
  return true;
}

function clearFieldError(field) {
  const element = errorElement(field);
  if (element) {
    element.hidden = true;
    element.textContent = "";
  }
  const input = inputOf(field);
  if (input) input.removeAttribute("aria-invalid");
}

function clearFieldErrors() {
  for (const element of document.querySelectorAll("#submit-form .field-error")) {
    element.hidden = true;
    element.textContent = "";
  }
  for (const input of document.querySelectorAll("#submit-form [aria-invalid]")) input.removeAttribute("aria-invalid");
}

/** Show a problem next to its field(s); returns the element to focus. */
function showProblem(err) {
  let placed = [];
  const fields = err.fieldErrors();
  for (const { field, message } of fields) {
    if (field === "check_spec" && specSource() === "form") {
      const sub = specFieldOf(message);
      if (sub && showFieldError(sub, message)) {
        placed.push(sub);
        continue;
      }
    }
    if (showFieldError(field, message)) placed.push(field);
  }
  if (!placed.length && err.status === 413 && showFieldError("model", err.detail)) placed = ["model"];
  if (!placed.length) {
    $("form-error").textContent = `${err.title}: ${err.detail}`;
    $("form-error").hidden = false;
    return $("submit-job");
  }
  return inputOf(placed[0]) || $("submit-job");
}

function progress(loaded, total) {
  const percent = total ? Math.round((100 * loaded) / total) : 0;
  $("upload-progress").value = percent;
  $("upload-text").textContent = t("new.upload.progress", {
    percent, loaded: formatBytes(loaded), total: formatBytes(total),
  });
}

async function submit(event) {
  event.preventDefault();
  clearError();
  clearFieldErrors();
  $("form-error").hidden = true;
  if (!form.file) {
    showFieldError("model", t("new.model.missing"));
    $("model").focus();
    return;
  }
  const spec = specSource() === "form" ? specFromForm() : $("check-spec").value;
  const body = new FormData();
  body.append("check_spec", spec);
  body.append("mode", $("mode").value);
  body.append("task", $("task").value);
  const releases = $("releases").value.trim();
  if (releases && $("task").value === "bisect-releases") body.append("releases", releases);
  const source = $("source_job_id").value.trim();
  if (source && $("task").value.startsWith("bisect-")) {
    body.append("source_job_id", source);
    body.append("on", $("on").value);
  }
  if ($("allow_nonfinite").checked && $("task").value === "precision") body.append("allow_nonfinite", "true");
  const modelPath = $("model-path").value.trim();
  if (modelPath) body.append("model_path", modelPath);
  for (const name of OPTION_FIELDS) body.append(name, $(name).checked ? "true" : "false");
  body.append("model", form.file, form.file.name); // after the small fields: they are read first
  const golden = $("golden").files[0];
  if (golden) body.append("golden", golden, golden.name);
  for (const file of $("inputs").files) body.append("inputs", file, file.name); // in order: sample order
  form.busy = true;
  $("submit-job").disabled = true;
  $("upload").hidden = false;
  progress(0, form.file.size);
  try {
    const created = await upload("/v1/jobs", body, { "Idempotency-Key": randomKey() }, progress, () => {
      $("upload-text").textContent = t("new.upload.checking");
    });
    $("upload").hidden = true;
    location.hash = `#/jobs/${created.id}`;
  } catch (err) {
    $("upload").hidden = true;
    if (err instanceof ApiError) showProblem(err).focus();
    else showError(err); // no token, or the network
  } finally {
    form.busy = false;
    $("submit-job").disabled = Boolean(signInHint());
  }
}

function showGolden() {
  const file = $("golden").files[0];
  $("golden-chosen").textContent = file
    ? t("new.model.chosen", { name: file.name, size: formatBytes(file.size) })
    : t("new.golden.none");
}

function showInputs() {
  const files = [...$("inputs").files];
  $("inputs-chosen").textContent = files.length
    ? files.map((file) => t("new.model.chosen", { name: file.name, size: formatBytes(file.size) })).join(", ")
    : t("new.inputs.none");
}

export function bindNew() {
  initCheckForm();
  $("inputs").addEventListener("change", () => {
    clearFieldError("inputs");
    showInputs();
  });
  $("golden").addEventListener("change", () => {
    clearFieldError("golden");
    showGolden();
  });
  const zone = $("drop-zone");
  $("model").addEventListener("change", () => chooseFile($("model").files[0]));
  for (const name of ["dragenter", "dragover"]) {
    zone.addEventListener(name, (event) => {
      event.preventDefault();
      zone.classList.add("dragging");
    });
  }
  zone.addEventListener("dragleave", () => zone.classList.remove("dragging"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("dragging");
    const file = event.dataTransfer && event.dataTransfer.files[0];
    if (file) chooseFile(file);
  });
  for (const id of ["spec-source-form", "spec-source-yaml"]) {
    $(id).addEventListener("change", () => {
      const yaml = specSource() === "yaml";
      if (yaml) $("check-spec").value = specFromForm();
      $("check-form").hidden = yaml;
      $("field-check_spec").hidden = !yaml;
      clearFieldErrors();
    });
  }
  $("check-form").addEventListener("input", syncCheckForm);
  $("check-form").addEventListener("change", syncCheckForm);
  for (const element of document.querySelectorAll("#submit-form input, #submit-form select, #submit-form textarea")) {
    element.addEventListener("input", () => {
      const container = element.closest(".field, .check");
      const error = container && container.querySelector(".field-error");
      if (error) {
        error.hidden = true;
        element.removeAttribute("aria-invalid");
      }
    });
  }
  $("submit-form").addEventListener("submit", submit);
}
