// hybriddeid review page: the queue, one note at a time, edits kept here until saved.
// Offsets are Unicode code points (as Python counts them), so text is handled as an array of them.
"use strict";
const TOKEN = document.querySelector('meta[name="review-token"]').content;
const $ = (id) => document.getElementById(id);
const state = { queue: [], labels: [], categories: {}, note: null, chars: [], spans: [], chances: [],
                selected: -1, undo: [], dirty: false, decisions: {} };

async function api(path, body) {
  const options = body === undefined ? {} : { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "X-Review-Token": TOKEN } };
  const response = await fetch(path, options);
  const data = await response.json();
  if (!response.ok) throw Object.assign(new Error(data.error || response.statusText), { status: response.status });
  return data;
}

function say(text) { $("message").textContent = text; }
const fmt = (x, digits = 2) => Number(x).toFixed(digits);

// -- queue --------------------------------------------------------------------------------------
async function loadQueue() {
  const data = await api("/api/queue");
  state.queue = data.notes; state.labels = data.labels; state.categories = data.categories;
  const r = data.risk;
  const how = r.uncalibrated_because ? `uncalibrated: ${r.uncalibrated_because}`
    : `calibrated on ${r.reviewed_notes} reviewed notes`;
  $("folder-risk").textContent = `Folder: ~${fmt(r.expected_missed, 1)} missed PHI tokens ` +
    `(${fmt(r.interval[0], 1)}–${fmt(r.interval[1], 1)}), ${fmt(r.per_1000)} per 1,000 tokens, ${how}`;
  const typeSelect = $("filter-type");
  if (typeSelect.options.length === 1) {
    for (const label of state.labels) typeSelect.add(new Option(label, label));
    for (const label of state.labels) $("label-select").add(new Option(label, label));
    const cats = [...new Set(Object.values(state.categories))].sort();
    $("legend").innerHTML = "";
    for (const cat of cats) {
      const chip = document.createElement("span"); chip.className = "cat-" + cat; chip.textContent = cat;
      $("legend").appendChild(chip);
    }
  }
  renderQueue();
}

function visibleQueue() {
  const type = $("filter-type").value, status = $("filter-status").value, low = $("filter-low").checked;
  const level = Number($("low-level").value);
  return state.queue.filter((n) => (!type || n.labels.includes(type)) &&
    (!status || (status === "reviewed") === n.reviewed) && (!low || n.min_score < level));
}

function renderQueue() {
  const list = $("queue"); list.innerHTML = "";
  for (const n of visibleQueue()) {
    const li = document.createElement("li");
    li.dataset.name = n.name;
    li.className = (n.reviewed ? "reviewed " : "") + (state.note && state.note.name === n.name ? "current" : "");
    li.innerHTML = `<span class="risk" title="expected missed PHI tokens"></span><span class="qname"></span>`;
    li.querySelector(".risk").textContent = fmt(n.risk);
    li.querySelector(".qname").textContent = (n.reviewed ? "✓ " : "") + n.name;
    li.addEventListener("click", () => openNote(n.name));
    list.appendChild(li);
  }
}

async function moveNote(step) {
  const names = visibleQueue().map((n) => n.name);
  if (!names.length) return;
  const at = state.note ? names.indexOf(state.note.name) : -1;
  const next = names[Math.min(Math.max(at + step, 0), names.length - 1)];
  if (next && (!state.note || next !== state.note.name)) await openNote(next);
}

// -- one note -----------------------------------------------------------------------------------
async function openNote(name) {
  if (state.dirty && !confirm("Unsaved changes in this note: leave it?")) return;
  const note = await api("/api/note/" + encodeURIComponent(name));
  state.note = note; state.chars = Array.from(note.text);
  state.spans = note.spans.map((s) => ({ ...s })); state.chances = note.chances;
  state.selected = state.spans.length ? 0 : -1; state.undo = []; state.dirty = false; state.decisions = {};
  $("note-name").textContent = note.name;
  $("note-risk").textContent = `~${fmt(note.risk.expected_missed)} missed PHI tokens ` +
    `(${fmt(note.risk.per_1000)} per 1,000)`;
  renderStatus(); render(); renderQueue(); $("note-text").focus();
}

function renderStatus() {
  const r = state.note.record || {};
  $("note-status").textContent = (state.note.reviewed ? "reviewed" : "not reviewed") +
    (r.reviewer ? ` · saved by ${r.reviewer} at ${r.saved_at}` : "") + (state.dirty ? " · unsaved changes" : "");
}

function render() {
  const box = $("note-text"); box.innerHTML = "";
  const chars = state.chars, low = Number($("low-level").value), po = Number($("po-level").value);
  const maybe = new Map();
  for (const c of state.chances) if (c.p_o < po) for (let i = c.start; i < c.end; i++) maybe.set(i, c);
  const spanAt = new Map();
  state.spans.forEach((s, index) => { for (let i = s.start; i < s.end; i++) spanAt.set(i, index); });
  let i = 0;
  while (i < chars.length) {
    const index = spanAt.has(i) ? spanAt.get(i) : -1;
    if (index >= 0) {
      const s = state.spans[index];
      const el = document.createElement("mark");
      el.className = `span ${s.status} cat-${state.categories[s.label] || "OTHER"}` +
        (s.score < low && s.status === "pending" ? " low" : "") + (index === state.selected ? " selected" : "");
      el.dataset.index = index; el.dataset.start = s.start;
      el.title = `${s.label} · ${s.source} · score ${fmt(s.score, 3)}` + (s.status !== "pending" ? ` · ${s.status}` : "");
      el.textContent = chars.slice(s.start, s.end).join("");
      el.addEventListener("click", (e) => { if (!hasSelection()) { state.selected = index; render(); } });
      box.appendChild(el); i = s.end; continue;
    }
    let j = i;
    const chance = maybe.get(i);
    if (chance) { while (j < chars.length && maybe.get(j) === chance && !spanAt.has(j)) j++; }
    else { while (j < chars.length && !spanAt.has(j) && !maybe.has(j)) j++; }
    const el = document.createElement("span");
    el.dataset.start = i; el.textContent = chars.slice(i, j).join("");
    if (chance) { el.className = "maybe"; el.title = `possible ${chance.label || "PHI"} · P(O) ${fmt(chance.p_o, 3)}`; }
    box.appendChild(el); i = j;
  }
  const s = state.spans[state.selected];
  $("span-info").textContent = s ? `${s.label} · ${s.source} · score ${fmt(s.score, 3)} · ${s.status}\n` +
    `“${chars.slice(s.start, s.end).join("")}” [${s.start}, ${s.end})` : "no span selected";
  if (s) $("label-select").value = s.label;
  const sel = box.querySelector(".selected"); if (sel) sel.scrollIntoView({ block: "nearest" });
  renderStatus();
}

function hasSelection() { const sel = window.getSelection(); return sel && !sel.isCollapsed; }

// Code-point offset of a DOM position inside #note-text.
function offsetOf(node, offset) {
  let el = node.nodeType === Node.TEXT_NODE ? node.parentElement : node;
  if (node.nodeType !== Node.TEXT_NODE) {  // a position between children
    const child = node.childNodes[offset];
    if (child && child.dataset) return Number(child.dataset.start);
    return state.chars.length;
  }
  return Number(el.dataset.start) + Array.from(node.textContent.slice(0, offset)).length;
}

// -- edits --------------------------------------------------------------------------------------
function edit(change, what) {
  state.undo.push(JSON.stringify({ spans: state.spans, selected: state.selected }));
  change(); state.dirty = true;
  state.decisions[what] = (state.decisions[what] || 0) + 1;
  render(); say(what);
}
function current() { return state.spans[state.selected]; }
function setStatus(status) {
  const s = current(); if (!s) return say("no span selected");
  edit(() => { s.status = status; }, status === "rejected" ? "rejected" : "accepted");
}
function relabel() {
  const s = current(); if (!s) return say("no span selected");
  const label = $("label-select").value;
  if (label === s.label) return say("same label");
  edit(() => { s.label = label; if (s.status !== "added") s.status = "accepted"; }, "relabelled");
}
function overlapsOther(start, end, except) {
  return state.spans.some((s, i) => i !== except && s.status !== "rejected" && s.start < end && start < s.end);
}
function move(which, step) {
  const s = current(); if (!s) return say("no span selected");
  const start = s.start + (which === "start" ? step : 0), end = s.end + (which === "end" ? step : 0);
  if (start < 0 || end > state.chars.length || start >= end) return say("cannot move there");
  if (overlapsOther(start, end, state.selected)) return say("it would overlap another span");
  edit(() => { s.start = start; s.end = end; if (s.status === "pending") s.status = "accepted"; }, "adjusted");
}
function addFromSelection() {
  const sel = window.getSelection();
  if (!sel || sel.isCollapsed || !$("note-text").contains(sel.anchorNode)) return say("select some text first");
  const range = sel.getRangeAt(0);
  let start = offsetOf(range.startContainer, range.startOffset), end = offsetOf(range.endContainer, range.endOffset);
  while (start < end && /\s/.test(state.chars[start])) start++;
  while (end > start && /\s/.test(state.chars[end - 1])) end--;
  if (start >= end) return say("the selection holds no text");
  const label = $("label-select").value || state.labels[0];
  edit(() => {
    // spans the new one overlaps are rejected (model spans) or dropped (added ones)
    state.spans = state.spans.filter((s) => !(s.status === "added" && s.start < end && start < s.end));
    for (const s of state.spans) if (s.start < end && start < s.end) s.status = "rejected";
    // a rejected span under the new one is dropped from view, so offsets never overlap on screen
    state.spans = state.spans.filter((s) => !(s.status === "rejected" && s.start < end && start < s.end));
    state.spans.push({ start, end, label, source: "review", score: 1, status: "added" });
    state.spans.sort((a, b) => a.start - b.start);
    state.selected = state.spans.findIndex((s) => s.start === start && s.end === end);
  }, "added");
  sel.removeAllRanges();
}
function undo() {
  const last = state.undo.pop(); if (!last) return say("nothing to undo");
  const saved = JSON.parse(last); state.spans = saved.spans; state.selected = saved.selected;
  state.dirty = true; render(); say("undone");
}
async function save(reviewed) {
  if (!state.note) return;
  if (reviewed) for (const s of state.spans) if (s.status === "pending") s.status = "accepted";
  const spans = state.spans.filter((s) => s.status !== "rejected").map((s) => ({ start: s.start, end: s.end, label: s.label }));
  try {
    const done = reviewed || state.note.reviewed;
    const result = await api("/api/note/" + encodeURIComponent(state.note.name),
      { spans, reviewed: done, reviewer: $("reviewer").value || "unknown", decisions: state.decisions,
        version: state.note.version });
    state.note.record = result.record; state.note.reviewed = result.record.reviewed; state.dirty = false;
    state.note.version = result.record.version;
    say(reviewed ? "saved; note reviewed" : "saved"); $("message").classList.remove("conflict");
    await loadQueue(); render();
  } catch (error) {
    // 409: someone saved this note since it was opened here; the edits stay on the page, unsaved
    say((error.status === 409 ? "NOT SAVED, saved elsewhere meanwhile: " : "not saved: ") + error.message);
    $("message").classList.toggle("conflict", error.status === 409);
  }
}
function select(step) {
  if (!state.spans.length) return;
  state.selected = (state.selected + step + state.spans.length) % state.spans.length; render();
}

// -- wiring -------------------------------------------------------------------------------------
$("btn-accept").onclick = () => setStatus("accepted");
$("btn-reject").onclick = () => setStatus("rejected");
$("btn-relabel").onclick = relabel;
$("btn-start-left").onclick = () => move("start", -1);
$("btn-start-right").onclick = () => move("start", 1);
$("btn-end-left").onclick = () => move("end", -1);
$("btn-end-right").onclick = () => move("end", 1);
$("btn-add").onclick = addFromSelection;
$("btn-undo").onclick = undo;
$("btn-save").onclick = () => save(false);
$("btn-done").onclick = () => save(true);
$("help-button").onclick = () => { $("help").hidden = !$("help").hidden; };
for (const id of ["filter-type", "filter-status", "filter-low"]) $(id).addEventListener("change", renderQueue);
for (const id of ["low-level", "po-level"]) $(id).addEventListener("change", () => state.note && render());
$("label-select").addEventListener("keydown", (e) => {
  if (e.key === "Enter") { e.preventDefault(); relabel(); $("note-text").focus(); }
  if (e.key === "Escape") { e.preventDefault(); $("note-text").focus(); }
});
$("reviewer").value = localStorage.getItem("hybriddeid-reviewer") || "";
$("reviewer").addEventListener("change", () => localStorage.setItem("hybriddeid-reviewer", $("reviewer").value));

document.addEventListener("keydown", (e) => {
  const t = e.target;
  if (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA") return;
  if ((e.ctrlKey || e.metaKey) && e.key === "z") { e.preventDefault(); return undo(); }
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const keys = {
    j: () => select(1), k: () => select(-1), a: () => setStatus("accepted"), d: () => setStatus("rejected"),
    Delete: () => setStatus("rejected"), l: () => $("label-select").focus(), e: addFromSelection, u: undo,
    s: () => save(false), w: () => save(true), n: () => moveNote(1), p: () => moveNote(-1),
    "[": () => move("start", -1), "{": () => move("start", 1), "}": () => move("end", -1), "]": () => move("end", 1),
    "?": () => { $("help").hidden = !$("help").hidden; },
  };
  if (keys[e.key]) { e.preventDefault(); keys[e.key](); }
});

loadQueue().then(() => { const first = visibleQueue()[0]; if (first) openNote(first.name); })
  .catch((error) => say("could not load: " + error.message));
