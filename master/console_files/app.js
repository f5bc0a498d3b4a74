// Sparkyard's web console: a small single-page app over the master's JSON API (/api/…).
//
// Every piece of data reaches the page as text (textContent, SVG attributes set one by one): job names,
// arguments and logs are user data and are never parsed as HTML. The page keeps the master's token (if
// it wants one) in sessionStorage and sends it as "Authorization: Bearer …" with every API call.
"use strict";

const TOKEN_KEY = "sparkyard.token";
const SVG_NS = "http://www.w3.org/2000/svg";
const TERMINAL_ATTEMPTS = new Set(["SUCCEEDED", "FAILED", "LOST", "CANCELLED", "TIMED_OUT", "RELEASED", "KILLED"]);
const REFRESH_MS = 5000;

let pageAbort = new AbortController();  // aborted when the page changes: ends log streams and refreshes
let refreshTimer = 0;

// ---- DOM helpers ------------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, String(value));
  }
}

function badge(state) { return h("span", { class: `badge ${state}` }, state); }

function title(text) { return s("title", {}, text); }

// ---- time -------------------------------------------------------------------------------------------

function ms(t) { return t ? Date.parse(t) : 0; }

function when(t) {
  if (!t) return "-";
  const d = new Date(t);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function seconds(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return "-";
  if (x < 1) return `${Math.round(x * 1000)} ms`;
  if (x < 120) return `${x.toFixed(1)} s`;
  if (x < 7200) return `${Math.floor(x / 60)}m${Math.round(x % 60)}s`;
  return `${Math.floor(x / 3600)}h${Math.round((x % 3600) / 60)}m`;
}

function took(o) { return o.started_at && o.finished_at ? (ms(o.finished_at) - ms(o.started_at)) / 1000 : null; }

// Lateness, as `sparkyard runs` shows it: from the scheduled time to the start (the firing and then the
// queueing: waiting for a slot, a warm driver), or to the firing while it has not started.
// A rerun keeps its original's scheduled time, a backfill's run has the past time asked for: neither is late;
// nor is a run fired ahead of its time (the master's --fire-ahead) that has not begun (it begins at its time).
function late(run) {
  const end = run.started_at || run.fired_at;
  return run.scheduled_at && end && !run.rerun_of && !run.after_run && !run.backfill && ms(end) >= ms(run.scheduled_at)
    ? (ms(end) - ms(run.scheduled_at)) / 1000 : null;
}

// ---- the API ----------------------------------------------------------------------------------------

class ApiError extends Error {}

// An error answer as one line: the API's {"error": …}, else the first line of a plain-text body (the HTTP
// server's own answers, such as 403 for a viewer's action or 405, are text), else the status.
async function failure(reply) {
  const text = await reply.text();
  let message;
  try {
    message = (JSON.parse(text) || {}).error;
  } catch (notJson) {
    message = text.trim().split("\n")[0];
  }
  return new ApiError(message || `HTTP ${reply.status}`);
}

async function api(path, options = {}) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const reply = await fetch(path, { ...options, headers, signal: options.signal || pageAbort.signal });
  if (reply.status === 401) {
    askToken(token ? "That token was refused." : "");
    throw new ApiError("this master wants a token");
  }
  if (!reply.ok) throw await failure(reply);
  return options.raw ? reply : reply.json();
}

function act(path, done) {
  return async (event) => {
    const button = event.currentTarget;
    button.disabled = true;
    try {
      const result = await api(path, { method: "POST" });
      notice(done(result), true);
      render(true);  // the page as the action left it, unless the user began filling in one of its forms
    } catch (err) {
      notice(err.message, false);
    } finally {
      button.disabled = false;
    }
  };
}

// Cancel an active run (asks first): its running tasks stop; a pipeline run's steps not started never start.
function cancelRun(runId) {
  const cancel = act(`/api/runs/${encodeURIComponent(runId)}/cancel`, () => `Cancelled run ${runId}`);
  return (event) => { if (confirm(`Cancel run ${runId}? Its running tasks are stopped and nothing more of it starts.`)) cancel(event); };
}

function isActive(run) { return run.state === "RUNNING" || run.state === "SCHEDULED"; }

function notice(text, ok) {
  const box = document.getElementById("notice");
  box.textContent = text;
  box.className = ok ? "notice ok" : "notice";
  box.hidden = !text;
}

function askToken(why) {
  const form = document.getElementById("login");
  form.hidden = false;
  document.getElementById("main").replaceChildren();
  document.getElementById("login-error").textContent = why;
  document.getElementById("token").focus();
}

// ---- pages ------------------------------------------------------------------------------------------

function route() {
  const hash = location.hash.replace(/^#\/?/, "") || "jobs";
  const [path, query] = hash.split("?");
  const [page, ...rest] = path.split("/");
  return { page, id: decodeURIComponent(rest.join("/")), query: new URLSearchParams(query || "") };
}

// ``refresh``: the page's own rebuild, periodic or after an action (not a navigation), which must not replace
// a form the user began filling in while it was being built; the refresh the page arms shows it later.
async function render(refresh = false) {
  pageAbort.abort();
  pageAbort = new AbortController();
  clearTimeout(refreshTimer);
  const { page, id, query } = route();
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("current", a.dataset.page === page || (page === "job" || page === "run") && a.dataset.page === "jobs");
  }
  const pages = { jobs: jobsPage, job: jobPage, run: runPage, workers: workersPage, timeline: timelinePage };
  const main = document.getElementById("main");
  try {
    const content = await (pages[page] || jobsPage)(id, query);
    if (!refresh || !editing()) {  // else the page function armed the next refresh already
      document.getElementById("login").hidden = true;
      main.replaceChildren(...content.filter((c) => c !== null && c !== undefined && c !== false));
    }
  } catch (err) {
    if (err.name === "AbortError") return;
    if (!(err instanceof ApiError)) console.warn(err);
    if (document.getElementById("login").hidden) main.replaceChildren(h("p", { class: "error" }, err.message));
  }
  showMaster();
}

async function showMaster() {
  try {
    const st = await api("/api/status");
    const text = st.role === "leader" ? `${st.master_id} · leader · epoch ${st.epoch}`
      : `${st.master_id} · standby (actions go to the leader ${st.leader || "being elected"})`;
    document.getElementById("master").textContent = text;
    if (st.may_act === false) forbidActions();
  } catch (err) { /* the page already says what is wrong */ }
}

// A viewer's token reads but may not act (the master answers 403): its action buttons are disabled.
function forbidActions() {
  for (const button of document.querySelectorAll("#main .actions button, #main form.act button, #main button.act")) {
    button.disabled = true;
    button.title = "needs the admin token (this one is a viewer's)";
  }
}

// A refresh rebuilds the page, so it waits while the user is filling in one of its forms: a schedule
// half typed, a filter chosen, must not be reset under the user's hands.
function editing() {
  return document.querySelector("#main form:focus-within, #main form[data-edited]") !== null;
}

function refreshIn(delay) {
  refreshTimer = setTimeout(() => { if (!document.hidden && !editing()) render(true); else refreshIn(delay); }, delay);
}

// Jobs ------------------------------------------------------------------------------------------------

function sparkline(values) {
  const width = 90, height = 22;
  const points = values.filter((v) => v !== null);
  if (points.length < 2) return h("span", { class: "muted" }, "-");
  const top = Math.max(...points) || 1;
  const step = width / (points.length - 1);
  const d = points.map((v, i) => `${i ? "L" : "M"}${(i * step).toFixed(1)},${(height - 2 - (v / top) * (height - 4)).toFixed(1)}`).join(" ");
  return s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "sparkline", role: "img" },
    title(`durations, oldest to newest: ${points.map(seconds).join(", ")}`), s("path", { d, class: "spark" }));
}

async function jobsPage(_, query) {
  const params = new URLSearchParams();
  for (const key of ["state", "pipelines", "group", "name", "label", "q"]) if (query.get(key)) params.set(key, query.get(key));
  if (query.get("limit")) params.set("limit", query.get("limit"));  // jobs a page shows (100 unless given)
  const filters = params.toString();
  if (query.get("after")) params.set("after", query.get("after"));
  const data = await api(`/api/jobs?${params}`);
  const field = (name, placeholder) => h("input", { name, placeholder, value: query.get(name) || "" });
  const state = h("select", { name: "state" }, ["", "active", "paused", "completed", "cancelled"].map(
    (v) => h("option", { value: v, selected: query.get("state") === v }, v || "any state")));
  // Pipelines alone come from the master's index of them: a page of them reads no other job.
  const pipelines = h("label", {}, h("input", { type: "checkbox", name: "pipelines", value: "1",
    checked: query.get("pipelines") === "1" }), " pipelines only");
  const form = h("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    const chosen = new URLSearchParams();
    for (const [k, v] of new FormData(e.target)) if (v) chosen.set(k, v);
    location.hash = `#/jobs?${chosen}`;
  } }, state, pipelines, field("group", "group"), field("name", "name"), field("label", "label K or K=V"),
  field("q", "search id, name, entrypoint, args"), h("button", { type: "submit" }, "Filter"));
  const rows = data.jobs.map(({ job, schedule, runs, shown_state }) => {
    const oldest = [...runs].reverse();
    return h("tr", {},
      h("td", {}, h("a", { href: `#/job/${encodeURIComponent(job.id)}` }, job.spec.name || job.id), pipelineMark(job),
        h("div", { class: "muted mono" }, job.id)),
      h("td", {}, badge(shown_state)),
      h("td", {}, job.spec.group),
      h("td", {}, schedule),
      h("td", {}, when(job.next_fire_at)),
      h("td", {}, h("span", { class: "dots" }, oldest.map((r) => h("a", { href: `#/run/${encodeURIComponent(r.id)}`,
        class: `dot ${r.state}`, title: `${r.state} · ${when(r.scheduled_at)} · ${seconds(took(r))}` })))),
      h("td", {}, sparkline(oldest.map(took))),
      h("td", { class: "num" }, job.runs));
  });
  const table = rows.length ? h("table", { id: "jobs" }, h("thead", {}, h("tr", {},
    ["job", "state", "group", "schedule", "next fire", "last runs", "duration", "runs"].map((c) => h("th", {}, c)))),
  h("tbody", {}, rows)) : h("div", { class: "empty" }, "No job matches.");
  refreshIn(REFRESH_MS);
  return [h("h1", {}, "Jobs"), form, table, jobsPaging(data, filters, query.get("after"))];
}

// Under the jobs table: what a filtered page looked at, and links to the newest and the next jobs (a page
// looks at a bounded number of jobs; the next one goes on from where it stopped).
function jobsPaging(data, filters, after) {
  const looked = data.scanned !== null
    ? `Filters looked at ${data.scanned} jobs${after ? " after the previous page" : " from the newest"}. ` : "";
  const link = (label, extra) => h("a", { href: `#/jobs?${new URLSearchParams([...new URLSearchParams(filters), ...extra])}` }, label);
  if (!looked && !after && !data.next) return null;
  return h("p", { class: "muted paging" }, looked, after ? link("newest", []) : null, after && data.next ? " · " : null,
    data.next ? link("next page", [["after", data.next]]) : null);
}

// Job -------------------------------------------------------------------------------------------------

function barChart(label, runs, value, cls) {
  const width = 600, height = 140, left = 44, bottom = 18;
  const values = runs.map(value);
  const top = Math.max(0.001, ...values.filter((v) => v !== null));
  const step = Math.min(24, (width - left) / Math.max(1, runs.length));
  const bars = runs.map((run, i) => {
    const v = values[i];
    const barHeight = v === null ? 0 : Math.max(1, (v / top) * (height - bottom - 8));
    return s("rect", { x: left + i * step + 1, y: height - bottom - barHeight, width: Math.max(1, step - 2),
      height: barHeight, class: cls(run) }, title(`${run.id}: ${seconds(v)} (${run.state})`));
  });
  return s("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img",
    "aria-label": label },
  s("line", { x1: left, y1: height - bottom, x2: width, y2: height - bottom, class: "axis" }),
  s("text", { x: 0, y: 12 }, seconds(top)), s("text", { x: 0, y: height - bottom }, "0"),
  s("text", { x: left, y: height - 4 }, `${runs.length} run${runs.length === 1 ? "" : "s"}, oldest first`), bars);
}

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

async function jobPage(jobId, query) {
  const [view, runs] = await Promise.all([api(`/api/jobs/${encodeURIComponent(jobId)}`),
    api(`/api/jobs/${encodeURIComponent(jobId)}/runs?limit=50`)]);
  const { job, schedule } = view;
  const base = `/api/jobs/${encodeURIComponent(job.id)}`;
  const actions = h("div", { class: "actions" },
    h("button", { id: "trigger", onclick: act(`${base}/trigger`, (run) => `Triggered: run ${run.id} is ${run.state}`),
      disabled: job.state === "CANCELLED" }, "Trigger now"),
    h("button", { id: "pause", onclick: act(`${base}/pause`, (j) => `Job is ${j.state}`), disabled: job.state !== "ACTIVE" }, "Pause"),
    h("button", { id: "resume", onclick: act(`${base}/resume`, (j) => `Job is ${j.state}`), disabled: job.state !== "PAUSED" }, "Resume"),
    h("button", { id: "delete", class: "danger", onclick: () => deleteJob(job) }, "Delete"));
  const trigger = job.spec.trigger;
  // A child job (--after) has no schedule of its own to edit.
  const editable = (job.state === "ACTIVE" || job.state === "PAUSED") && !trigger.after;
  const edit = h("form", { id: "edit-schedule", class: "filters act", onsubmit: (e) => editSchedule(e, job) },
    h("select", { name: "kind" }, h("option", { value: "cron", selected: !trigger.every }, "cron"),
      h("option", { value: "every", selected: !!trigger.every }, "every")),
    h("input", { name: "value", placeholder: "0 3 * * *  or  10m", size: 18,
      value: trigger.cron ? trigger.cron.expr : trigger.every ? `${trigger.every.interval}s` : "" }),
    h("input", { name: "tz", placeholder: "time zone (cron; default UTC)", value: trigger.cron ? trigger.cron.tz : "" }),
    h("button", { type: "submit", disabled: !editable }, "Change schedule"));
  // A recurring job (cron or every) has past fire times to backfill.
  const backfill = trigger.cron || trigger.every ? h("form", { id: "backfill", class: "filters act", onsubmit: (e) => startBackfill(e, job) },
    h("input", { name: "start", placeholder: "from, e.g. 2026-11-01T00:00:00Z", size: 26 }),
    h("input", { name: "end", placeholder: "to (not in the future)", size: 26 }),
    h("label", {}, "at most ", h("input", { name: "max_concurrent", type: "number", min: 1, value: 1, size: 4 }), " at once"),
    h("button", { type: "submit", disabled: job.state === "CANCELLED" }, "Backfill")) : null;
  const oldest = [...runs].reverse();
  const graph = isPipeline(job) ? await pipelinePanel(job, runs, query) : pipelineBacklink(job);
  const rows = runs.map((r) => h("tr", {},
    h("td", {}, h("a", { href: `#/run/${encodeURIComponent(r.id)}` }, r.id)), h("td", {}, badge(r.state)),
    h("td", {}, when(r.scheduled_at)), h("td", { class: "num" }, seconds(late(r))), h("td", { class: "num" }, seconds(took(r))),
    h("td", {}, `${r.tasks_succeeded}/${r.tasks_failed}/${r.tasks_cancelled} of ${r.task_count}`), h("td", {}, r.reason),
    h("td", {}, isActive(r) ? h("button", { class: "danger act cancel-run", "data-run": r.id, onclick: cancelRun(r.id) }, "cancel") : null)));
  refreshIn(REFRESH_MS);
  return [
    h("h1", {}, job.spec.name || job.id), actions, edit, backfill, graph,
    h("div", { class: "grid" },
      h("div", { class: "panel" }, facts([["id", h("span", { class: "mono" }, job.id)], ["state", badge(view.shown_state)],
        ["schedule", schedule], ["next fire", when(job.next_fire_at)], ...(isPipeline(job) ? [["steps", job.spec.steps.length]]
          : [["entrypoint", h("span", { class: "mono" }, job.spec.entrypoint)],
            ["args", h("span", { class: "mono" }, JSON.stringify(job.spec.args))]]), ["group", job.spec.group],
        ["priority", job.spec.priority], ["labels", Object.entries(job.spec.labels).map(([k, v]) => `${k}=${v}`).join(", ") || "-"],
        ["runs", job.runs], ["created", when(job.created_at)]])),
      h("div", { class: "panel" }, h("h2", {}, "Duration (start to end)"), barChart("run durations", oldest, took, (r) => r.state),
        h("h2", {}, "Trigger lateness (scheduled to fired)"), barChart("trigger lateness", oldest, late, () => "late"))),
    h("h2", {}, "Runs"),
    runs.length ? h("table", { id: "runs" }, h("thead", {}, h("tr", {}, ["run", "state", "scheduled", "late", "took",
      "tasks ok/failed/cancelled", "reason", ""].map((c) => h("th", {}, c)))), h("tbody", {}, rows))
      : h("div", { class: "empty" }, "No run yet."),
    h("h2", {}, "Spec"), h("pre", { id: "spec" }, JSON.stringify(job.spec, null, 2)),
  ];
}

// A new schedule takes effect from the next firing (UpdateJob); the master checks it as a submit's.
async function editSchedule(event, job) {
  event.preventDefault();
  const form = new FormData(event.target);
  const body = form.get("kind") === "cron" ? { cron: form.get("value"), tz: form.get("tz") } : { every: form.get("value") };
  try {
    const updated = await api(`/api/jobs/${encodeURIComponent(job.id)}/schedule`, { method: "POST", body: JSON.stringify(body) });
    await render();
    notice(`Schedule changed; next fire ${when(updated.next_fire_at)}`, true);
  } catch (err) {
    notice(err.message, false);
  }
}

// A backfill runs the job's past fire times in a range (as `sparkyard backfill`); the master keeps the plan.
async function startBackfill(event, job) {
  event.preventDefault();
  const form = new FormData(event.target);
  const body = { start: form.get("start"), end: form.get("end"), max_concurrent: Number(form.get("max_concurrent") || 1) };
  try {
    const plan = await api(`/api/jobs/${encodeURIComponent(job.id)}/backfill`, { method: "POST", body: JSON.stringify(body) });
    await render();
    notice(`Backfill of ${plan.planned} fire times, ${when(plan.first)} to ${when(plan.last)}: ${plan.added} new, `
      + `${plan.pending} still to run, at most ${body.max_concurrent} at once`, true);
  } catch (err) {
    notice(err.message, false);
  }
}

// Deleting asks first; a job with an active run is refused unless its runs are cancelled too (force).
async function deleteJob(job) {
  const name = job.spec.name || job.id;
  if (!confirm(`Delete job ${name}? It stops firing and its history is deleted.`)) return;
  const path = `/api/jobs/${encodeURIComponent(job.id)}`;
  try {
    await api(path, { method: "DELETE" });
  } catch (err) {
    if (!/active run/.test(err.message) || !confirm(`${err.message}\n\nCancel its active runs and delete it?`)) {
      notice(err.message, false);
      return;
    }
    try { await api(`${path}?force=1`, { method: "DELETE" }); } catch (again) { notice(again.message, false); return; }
  }
  history.pushState(null, "", "#/jobs");
  await render();
  notice(`Deleted job ${name}`, true);
}

// Run -------------------------------------------------------------------------------------------------

async function followLog(pre, taskId, attempt, follow) {
  pre.textContent = "";
  const params = new URLSearchParams({ attempt, follow: follow ? "1" : "0" });
  try {
    const reply = await api(`/api/tasks/${encodeURIComponent(taskId)}/log?${params}`, { raw: true });
    const reader = reply.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pre.append(document.createTextNode(decoder.decode(value, { stream: true })));
      pre.scrollTop = pre.scrollHeight;
    }
    pre.dataset.ended = "1";
  } catch (err) {
    if (err.name !== "AbortError") pre.append(document.createTextNode(`\n[${err.message}]\n`));
  }
}

async function runPage(runId, query) {
  const run = await api(`/api/runs/${encodeURIComponent(runId)}`);
  if (run.steps.length) return pipelineRunPage(run, query);
  // Shown once an attempt's "log" is clicked: an empty box before that says nothing.
  const logBox = h("pre", { class: "log", id: "log", hidden: true });
  const logTitle = h("h2", { hidden: true }, "Log");
  const rows = [];
  for (const task of run.tasks) {
    const attempts = task.attempts.length ? task.attempts : [null];
    for (const a of attempts) {
      const show = a ? h("button", { class: "show-log", onclick: (e) => {
        for (const tr of document.querySelectorAll("tr.picked")) tr.classList.remove("picked");
        e.currentTarget.closest("tr").classList.add("picked");
        const live = !TERMINAL_ATTEMPTS.has(a.state);
        logTitle.textContent = `Log of ${task.id}, attempt ${a.number}${live ? " (following)" : ""}`;
        logTitle.hidden = logBox.hidden = false;
        followLog(logBox, task.id, a.number, live);
      } }, "log") : null;
      rows.push(h("tr", { "data-task": task.id }, h("td", { class: "mono" }, task.id), h("td", {}, badge(task.state)),
        h("td", {}, a ? `${a.number} ` : "-", a ? badge(a.state) : null), h("td", {}, a ? a.worker : "-"),
        h("td", { class: "num" }, a ? a.fencing_token : "-"), h("td", {}, when(a && a.started_at)),
        h("td", {}, when(a && a.finished_at)), h("td", { class: "num" }, a ? seconds(took(a)) : "-"),
        h("td", { class: "mono" }, a ? (a.error || (a.result !== null ? JSON.stringify(a.result) : "")).slice(0, 300) : task.error),
        h("td", {}, show)));
    }
  }
  if (isActive(run)) refreshWhileRunning(run);
  const ended = !isActive(run);
  const base = `/api/runs/${encodeURIComponent(run.id)}/rerun`;
  const reran = (r) => {
    keepNotice = true;
    location.hash = `#/run/${encodeURIComponent(r.id)}`;
    return `Run ${r.id} reruns ${run.id}`;
  };
  const actions = h("div", { class: "actions" },
    h("button", { id: "rerun-failed", onclick: act(`${base}?failed=1`, reran),
      disabled: !ended || run.tasks_failed + run.tasks_cancelled === 0 }, "Rerun failed tasks"),
    h("button", { id: "rerun", onclick: act(base, reran), disabled: !ended }, "Rerun all"),
    h("button", { id: "cancel", class: "danger", onclick: cancelRun(run.id), disabled: ended }, "Cancel run"));
  return [
    h("h1", {}, run.id), pipelineBacklink(run), actions,
    h("div", { class: "panel" }, facts([["job", h("a", { href: `#/job/${encodeURIComponent(run.job_id)}` }, run.job_id)],
      ["state", badge(run.state)], ["scheduled", when(run.scheduled_at)], ["fired", when(run.fired_at)],
      ["rerun of", run.rerun_of ? h("a", { href: `#/run/${encodeURIComponent(run.rerun_of)}` }, run.rerun_of) : "-"],
      ["fired by", run.after_run ? h("a", { href: `#/run/${encodeURIComponent(run.after_run)}` }, run.after_run) : "-"],
      ["late", seconds(late(run))], ["took", seconds(took(run))], ["reason", run.reason || "-"],
      ["result", run.result !== null ? JSON.stringify(run.result) : "-"]])),
    h("h2", {}, "Tasks and attempts"),
    h("table", { id: "tasks" }, h("thead", {}, h("tr", {}, ["task", "state", "attempt", "worker", "fencing token", "start",
      "end", "took", "result / exit reason", ""].map((c) => h("th", {}, c)))), h("tbody", {}, rows)),
    logTitle, logBox,
  ];
}

// A running run's page is redrawn when it ends; the log being followed keeps going until then.
function refreshWhileRunning(run) {
  const signal = pageAbort.signal;
  const poll = async () => {
    if (signal.aborted) return;
    try {
      const now = await api(`/api/runs/${encodeURIComponent(run.id)}`, { signal });
      const following = document.querySelector("#log:not([data-ended])") && document.querySelector("tr.picked");
      if (now.state !== run.state && !following) { render(); return; }
    } catch (err) { if (err.name === "AbortError") return; }
    refreshTimer = setTimeout(poll, REFRESH_MS);
  };
  refreshTimer = setTimeout(poll, REFRESH_MS);
}

// Workers ---------------------------------------------------------------------------------------------

function runOf(taskId) { return taskId.replace(/\.\d+$/, ""); }

async function workersPage() {
  const workers = await api("/api/workers?all=1");
  const rows = workers.map((w) => h("tr", { "data-worker": w.id },
    h("td", { class: "mono" }, w.id), h("td", {}, w.alive ? badge(w.draining ? "draining" : "alive") : badge("gone")),
    h("td", {}, w.group), h("td", {}, w.host), h("td", { class: "num" }, w.slots),
    h("td", { class: "num" }, w.alive ? w.ready_slots - w.free_slots : "-"), h("td", { class: "num" }, w.alive ? w.free_slots : "-"),
    h("td", {}, w.alive ? badge((w.readiness || "READY").replace("READINESS_", "").toLowerCase()) : "-",
      w.readiness_reason ? h("div", { class: "muted" }, w.readiness_reason) : null),
    h("td", {}, Object.entries(w.labels).map(([k, v]) => `${k}=${v}`).join(", ")),
    h("td", {}, w.tasks.map((t) => h("div", {}, h("a", { class: "mono", href: `#/run/${encodeURIComponent(runOf(t))}` }, t)))),
    h("td", {}, when(w.last_seen)),
    h("td", {}, w.alive && !w.draining ? h("button", { class: "danger act drain", onclick: (e) => {
      if (confirm(`Drain worker ${w.id}? It finishes or hands back its tasks, then exits.`)) {
        act(`/api/workers/${encodeURIComponent(w.id)}/drain`, () => `Worker ${w.id} is draining`)(e);
      }
    } }, "drain") : null)));
  refreshIn(REFRESH_MS);
  return [h("h1", {}, "Workers"), rows.length ? h("table", { id: "workers" }, h("thead", {}, h("tr", {},
    ["worker", "", "group", "host", "slots", "used", "free", "readiness", "labels", "running tasks", "last seen", ""]
      .map((c) => h("th", {}, c)))), h("tbody", {}, rows)) : h("div", { class: "empty" }, "No worker has registered.")];
}

// Timeline --------------------------------------------------------------------------------------------

async function timelinePage() {
  const data = await api("/api/timeline");
  const bars = [];
  for (const run of data.runs) {
    for (const task of run.tasks) {
      for (const a of task.attempts) {
        if (!a.worker || !a.started_at) continue;
        bars.push({ worker: a.worker, start: ms(a.started_at), end: a.finished_at ? ms(a.finished_at) : data.until_ms,
          state: a.state, label: `${data.names[run.job_id] || run.job_id} · ${task.id} · attempt ${a.number} · ${a.state}`,
          run: run.id });
      }
    }
  }
  const workers = [...new Set(bars.map((b) => b.worker))].sort();
  const width = 1000, left = 140, row = 26, top = 22;
  const height = top + Math.max(1, workers.length) * row + 8;
  const span = data.until_ms - data.since_ms;
  const x = (t) => left + Math.max(0, (t - data.since_ms) / span) * (width - left - 10);
  const ticks = [];
  for (let i = 0; i <= 6; i++) {
    const t = data.since_ms + (span * i) / 6;
    ticks.push(s("line", { x1: x(t), y1: top - 4, x2: x(t), y2: height, class: "axis" }),
      s("text", { x: x(t), y: 12, "text-anchor": i === 0 ? "start" : i === 6 ? "end" : "middle" },
        new Date(t).toISOString().slice(11, 16)));
  }
  const chart = s("svg", { class: "gantt", id: "gantt", viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "attempts per worker over the last hour" }, ticks,
  workers.map((w, i) => s("text", { x: 4, y: top + i * row + 16 }, w)),
  bars.map((b) => {
    const link = s("a", { href: `#/run/${encodeURIComponent(b.run)}` }, s("rect", { x: x(b.start), y: top + workers.indexOf(b.worker) * row + 3,
      width: Math.max(3, x(b.end) - x(b.start)), height: row - 8, rx: 2, class: `bar ${b.state}` }, title(b.label)));
    return link;
  }));
  refreshIn(REFRESH_MS * 2);
  return [h("h1", {}, "Timeline"), h("p", { class: "muted" }, `Attempts per worker, ${when(new Date(data.since_ms))} to ${when(new Date(data.until_ms))}; a bar links to its run.`),
    bars.length ? chart : h("div", { class: "empty" }, "No task ran in the last hour.")];
}

// Pipelines -------------------------------------------------------------------------------------------
// A pipeline is a job whose spec has steps; a pipeline run's `steps` give each step's state and run.
// The graph is laid out by depth (a step is one column right of its deepest upstream step).

const STEP_W = 168, STEP_H = 46, STEP_GAP_X = 56, STEP_GAP_Y = 14, DAG_PAD = 10;

function isPipeline(job) { return job.spec.steps && job.spec.steps.length > 0; }

function pipelineMark(job) {
  return isPipeline(job) ? h("div", { class: "pipeline-mark" }, `pipeline · ${job.spec.steps.length} steps`) : null;
}

// Each step's box position: columns by depth, rows ordered by their upstream steps' rows, centred.
function dagLayout(steps) {
  const byName = new Map(steps.map((st) => [st.name, st]));
  const depth = new Map();
  const depthOf = (name) => {
    if (!depth.has(name)) {
      depth.set(name, 0);
      const ups = (byName.get(name) || { after: [] }).after.filter((u) => byName.has(u));
      depth.set(name, ups.length ? 1 + Math.max(...ups.map(depthOf)) : 0);
    }
    return depth.get(name);
  };
  const columns = [];
  for (const st of steps) (columns[depthOf(st.name)] ||= []).push(st);
  const tallest = Math.max(...columns.map((c) => c.length));
  const pos = new Map();
  columns.forEach((column, d) => {
    const centre = (st) => {
      const ys = st.after.filter((u) => pos.has(u)).map((u) => pos.get(u).y);
      return ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : 0;
    };
    const ordered = d ? [...column].sort((a, b) => centre(a) - centre(b)) : column;
    const offset = ((tallest - column.length) * (STEP_H + STEP_GAP_Y)) / 2;
    ordered.forEach((st, i) => pos.set(st.name, { x: DAG_PAD + d * (STEP_W + STEP_GAP_X),
      y: DAG_PAD + offset + i * (STEP_H + STEP_GAP_Y) }));
  });
  return { pos, width: 2 * DAG_PAD + columns.length * STEP_W + (columns.length - 1) * STEP_GAP_X,
    height: 2 * DAG_PAD + tallest * STEP_H + (tallest - 1) * STEP_GAP_Y };
}

function clip(text, n) { return text.length > n ? `${text.slice(0, n - 1)}…` : text; }

// steps: [{name, after, state, attempts}] (state "" when no run is shown); href(step): where a box leads.
function pipelineGraph(steps, href, picked) {
  const { pos, width, height } = dagLayout(steps);
  const edges = steps.flatMap((st) => st.after.filter((u) => pos.has(u)).map((u) => {
    const a = pos.get(u), b = pos.get(st.name);
    const x1 = a.x + STEP_W, y1 = a.y + STEP_H / 2, x2 = b.x - 3, y2 = b.y + STEP_H / 2, mid = (x1 + x2) / 2;
    return s("path", { class: "edge", d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, "marker-end": "url(#dag-arrow)",
      "data-edge": `${u}>${st.name}` });
  }));
  const boxes = steps.map((st) => {
    const p = pos.get(st.name);
    const state = st.state || "NOT_RUN";
    const label = st.state ? `${st.state}${st.attempts > 1 ? ` · ${st.attempts} attempts` : ""}` : "no run";
    const box = s("g", { class: `step${st.name === picked ? " picked" : ""}`, "data-step": st.name, "data-state": state },
      title(`${st.name}: ${label}${st.after.length ? ` (after ${st.after.join(", ")})` : ""}`),
      s("rect", { x: p.x, y: p.y, width: STEP_W, height: STEP_H, rx: 6 }),
      s("text", { x: p.x + 10, y: p.y + 19, class: "step-name" }, clip(st.name, 22)),
      s("text", { x: p.x + 10, y: p.y + 36, class: "step-state" }, label));
    const link = href(st);
    return link ? s("a", { href: link }, box) : box;
  });
  return s("svg", { class: "dag", id: "dag", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "pipeline graph" },
  s("defs", {}, s("marker", { id: "dag-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
    orient: "auto-start-reverse" }, s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow" }))), edges, boxes);
}

function stepHref(runId) { return (st) => `#/run/${encodeURIComponent(runId)}?step=${encodeURIComponent(st.name)}`; }

// The job page of a pipeline: its graph with the states of one run (the newest, or ?run=), and its runs to pick.
async function pipelinePanel(job, runs, query) {
  const chosen = query.get("run") || (runs[0] && runs[0].id) || "";
  const run = chosen ? await api(`/api/runs/${encodeURIComponent(chosen)}`) : null;
  const states = new Map(run ? run.steps.map((st) => [st.name, st]) : []);
  const steps = job.spec.steps.map((st) => ({ name: st.name, after: st.after, state: (states.get(st.name) || {}).state || "",
    attempts: (states.get(st.name) || {}).attempts || 0 }));
  const pick = runs.slice(0, 12).map((r) => h("a", { href: `#/job/${encodeURIComponent(job.id)}?run=${encodeURIComponent(r.id)}`,
    class: `run-pick${run && r.id === run.id ? " current" : ""}`, title: r.id }, badge(r.state), ` ${when(r.scheduled_at)}`));
  return h("div", { class: "panel", id: "pipeline" },
    h("h2", {}, run ? ["Graph of run ", h("a", { href: `#/run/${encodeURIComponent(run.id)}` }, run.id), " ", badge(run.state)]
      : `Graph (${job.spec.steps.length} steps; no run yet)`),
    h("div", { class: "dag-box" }, pipelineGraph(steps, run ? stepHref(run.id) : () => "", "")),
    pick.length ? h("div", { class: "run-picks" }, h("span", { class: "muted" }, "show run: "), pick) : null);
}

// A step job's or a step run's way back to its pipeline.
function pipelineBacklink(thing) {
  if (thing.pipeline_run) {
    return h("p", { class: "muted", id: "pipeline-link" }, "A step's run of pipeline run ",
      h("a", { href: `#/run/${encodeURIComponent(thing.pipeline_run)}` }, thing.pipeline_run));
  }
  if (thing.spec && thing.spec.pipeline) {
    return h("p", { class: "muted", id: "pipeline-link" }, "A step of pipeline ",
      h("a", { href: `#/job/${encodeURIComponent(thing.spec.pipeline)}` }, thing.spec.pipeline));
  }
  return null;
}

// A pipeline run's page: the graph with this run's states, every step, and the picked step's attempts and log.
async function pipelineRunPage(run, query) {
  const job = await api(`/api/jobs/${encodeURIComponent(run.job_id)}`).then((v) => v.job, () => null);
  const picked = query.get("step") || "";
  const rows = run.steps.map((st) => h("tr", { "data-step": st.name, class: st.name === picked ? "picked" : null },
    h("td", {}, h("a", { href: stepHref(run.id)(st) }, st.name)), h("td", {}, badge(st.state)),
    h("td", {}, st.after.join(", ") || "-"), h("td", { class: "num" }, st.attempts),
    h("td", {}, when(st.started_at)), h("td", { class: "num" }, seconds(took(st))),
    h("td", { class: "mono" }, st.run_id ? h("a", { href: `#/run/${encodeURIComponent(st.run_id)}` }, st.run_id) : "-")));
  const active = isActive(run);
  const reran = (r) => {
    keepNotice = true;
    location.hash = `#/run/${encodeURIComponent(r.id)}`;
    return `Run ${r.id} reruns ${run.id}`;
  };
  const base = `/api/runs/${encodeURIComponent(run.id)}/rerun`;
  const actions = h("div", { class: "actions" },
    h("button", { id: "rerun-failed", onclick: act(`${base}?failed=1`, reran),
      disabled: active || run.steps.every((st) => st.state === "SUCCEEDED") }, "Rerun failed steps"),
    h("button", { id: "rerun", onclick: act(base, reran), disabled: active }, "Rerun all"),
    h("button", { id: "cancel", class: "danger", onclick: cancelRun(run.id), disabled: !active }, "Cancel run"));
  const step = run.steps.find((st) => st.name === picked);
  if (active) refreshWhileStepsChange(run);
  return [
    h("h1", {}, run.id), actions,
    h("div", { class: "panel" }, facts([
      ["pipeline", h("a", { href: `#/job/${encodeURIComponent(run.job_id)}` }, job ? job.spec.name : run.job_id)],
      ["state", badge(run.state)], ["scheduled", when(run.scheduled_at)], ["fired", when(run.fired_at)],
      ["rerun of", run.rerun_of ? h("a", { href: `#/run/${encodeURIComponent(run.rerun_of)}` }, run.rerun_of) : "-"],
      ["took", seconds(took(run))], ["reason", run.reason || "-"]])),
    h("h2", {}, "Graph"), h("div", { class: "dag-box panel" }, pipelineGraph(run.steps, stepHref(run.id), picked)),
    h("h2", {}, "Steps"),
    h("table", { id: "steps" }, h("thead", {}, h("tr", {}, ["step", "state", "after", "attempts", "start", "took", "step's run"]
      .map((c) => h("th", {}, c)))), h("tbody", {}, rows)),
    step ? await stepDetail(step) : h("p", { class: "muted" }, "Click a step to see its attempts and log."),
  ];
}

// A step's attempts (every task of its run) and the log of its latest attempt; the step run's own page has the rest.
async function stepDetail(step) {
  const head = h("h2", { id: "step-detail" }, `Step ${step.name} `, badge(step.state));
  if (!step.run_id) return h("div", {}, head, h("p", { class: "muted" }, "This step has no run: it did not start."));
  const stepRun = await api(`/api/runs/${encodeURIComponent(step.run_id)}`);
  const logBox = h("pre", { class: "log", id: "step-log" });
  const logTitle = h("h2", {}, "Log");
  const show = (task, a) => {
    const live = !TERMINAL_ATTEMPTS.has(a.state);
    logTitle.textContent = `Log of ${task.id}, attempt ${a.number}${live ? " (following)" : ""}`;
    followLog(logBox, task.id, a.number, live);
  };
  const rows = stepRun.tasks.flatMap((task) => task.attempts.map((a) => h("tr", {},
    h("td", { class: "mono" }, task.id), h("td", {}, `${a.number} `, badge(a.state)), h("td", {}, a.worker),
    h("td", {}, when(a.started_at)), h("td", { class: "num" }, seconds(took(a))),
    h("td", { class: "mono" }, (a.error || (a.result !== null ? JSON.stringify(a.result) : "")).slice(0, 300)),
    h("td", {}, h("button", { class: "show-log", onclick: () => show(task, a) }, "log")))));
  const last = stepRun.tasks.length && stepRun.tasks[0].attempts.length ? stepRun.tasks[0] : null;
  if (last) show(last, last.attempts[last.attempts.length - 1]);
  return h("div", { class: "panel step-detail" }, head,
    h("p", {}, "Its run: ", h("a", { id: "step-run", href: `#/run/${encodeURIComponent(step.run_id)}` }, step.run_id),
      " (tasks, attempts, fencing tokens, rerun)"),
    rows.length ? h("table", { id: "step-attempts" }, h("thead", {}, h("tr", {}, ["task", "attempt", "worker", "start", "took",
      "result / exit reason", ""].map((c) => h("th", {}, c)))), h("tbody", {}, rows))
      : h("p", { class: "muted" }, "No attempt yet."),
    logTitle, logBox);
}

// A running pipeline run's page is redrawn when a step changes, unless a live log is being followed.
function refreshWhileStepsChange(run) {
  const signal = pageAbort.signal;
  const shape = (r) => JSON.stringify([r.state, r.steps.map((st) => [st.state, st.attempts])]);
  const poll = async () => {
    if (signal.aborted) return;
    try {
      const now = await api(`/api/runs/${encodeURIComponent(run.id)}`, { signal });
      if (shape(now) !== shape(run) && !document.querySelector("#step-log:not([data-ended])")) { render(); return; }
    } catch (err) { if (err.name === "AbortError") return; }
    refreshTimer = setTimeout(poll, REFRESH_MS);
  };
  refreshTimer = setTimeout(poll, REFRESH_MS);
}

// ---- start ------------------------------------------------------------------------------------------

document.getElementById("login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value);
  document.getElementById("login").hidden = true;
  render();
});
// An action that moves to another page (a rerun shows its new run) keeps its notice across the move.
let keepNotice = false;
for (const kind of ["input", "change"]) {
  document.getElementById("main").addEventListener(kind, (e) => { if (e.target.form) e.target.form.dataset.edited = "1"; });
}
window.addEventListener("hashchange", () => { if (!keepNotice) notice(""); keepNotice = false; render(); });
render();
