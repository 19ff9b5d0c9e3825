// The Workers screen: follows the engine's live feed and redraws what changed.
// Every value from the API is set as text (never as HTML), so nothing it holds can run.
"use strict";

const API = "/api/v1";
const RETRY_MS = 1000;
const TOKEN_KEY = "fluksio.access-token";

const $ = (id) => document.getElementById(id);

// -- small DOM helpers ---------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function ago(iso) {
  if (!iso) return "—";
  const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (seconds < 5) return "just now";
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

function until(iso) {
  if (!iso) return "—";
  const seconds = Math.round((Date.parse(iso) - Date.now()) / 1000);
  return seconds <= 0 ? "now" : `in ${seconds < 60 ? `${seconds} s` : `${Math.ceil(seconds / 60)} min`}`;
}

function time(iso) {
  return el("time", { datetime: iso || "", title: iso || "" }, ago(iso));
}

// A worker that answers was heard from within the last ping: its exact time changes every
// few seconds without changing the view, so only a silent worker's last contact is shown.
function seenCell(worker) {
  const cell = [time(worker.attached_at)];
  if (worker.status === "not answering") cell.push(el("br"), el("span", { class: "muted small" }, "last heard "), time(worker.last_seen));
  return cell;
}

function chips(labels) {
  if (!labels || !labels.length) return el("span", { class: "muted" }, "no labels");
  return el("span", { class: "chips" }, labels.map((label) => el("span", { class: "chip" }, label)));
}

function badge(text, kind) {
  return el("span", { class: `badge ${kind || text.replace(/\s+/g, "-")}` }, text);
}

function table(headings, rows) {
  const head = el("tr", {}, headings.map((heading) => el("th", { scope: "col" }, heading)));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, rows));
}

function empty(...lines) {
  return el("div", { class: "empty" }, lines.map((line) => el("p", {}, line)));
}

// A used-of-total bar; unknown totals say so instead of drawing a guess.
function bar(name, total, free, unit) {
  if (total === null || total === undefined) {
    return el("div", { class: "meter unknown" }, el("span", {}, `${name}: not reported`));
  }
  const used = Math.max(0, total - (free ?? total));
  const share = total > 0 ? Math.round((used / total) * 100) : 0;
  const show = (value) => (unit === "MB" && value >= 1024 ? `${(value / 1024).toFixed(1)} GB` : `${value}${unit ? ` ${unit}` : ""}`);
  const text = `${name}: ${show(used)} of ${show(total)} used`;
  const fill = el("span", { class: share >= 100 ? "meter-fill full" : "meter-fill" });
  fill.style.width = `${share}%`; // through CSSOM: the page's CSP forbids style attributes
  return el(
    "div",
    { class: "meter", role: "meter", "aria-label": text, "aria-valuemin": 0, "aria-valuemax": total, "aria-valuenow": used },
    el("span", { class: "meter-text" }, text),
    el("span", { class: "meter-track" }, fill),
  );
}

// -- the API -------------------------------------------------------------------------------

class Unauthorized extends Error {}

function authorized(headers = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  return headers;
}

// An answer the engine refused to this user: log in again, or not allowed at all.
function refusal(response, data, path) {
  if (response.status === 401 && path !== "/login/access-token") return new Unauthorized();
  if (response.status === 403) return new Unauthorized((data && data.detail) || "Only the superuser may use this screen.");
  return null;
}

async function api(method, path, { form, json } = {}) {
  const headers = authorized();
  let body;
  if (form) body = new URLSearchParams(form);
  if (json) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  }
  const response = await fetch(API + path, { method, headers, body, cache: "no-store" });
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  const refused = refusal(response, data, path);
  if (refused) throw refused;
  if (!response.ok) throw new Error((data && data.detail) || `${response.status} ${response.statusText}`);
  return data;
}

// -- logging in and out --------------------------------------------------------------------

function showLogin(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  lastEventId = null;
  stopFeed();
  $("screen").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("live").textContent = "";
  const error = $("login-error");
  error.hidden = !message;
  error.textContent = message || "";
  $("login-form").elements.username.focus();
}

async function logIn(event) {
  event.preventDefault();
  const form = event.target;
  const error = $("login-error");
  error.hidden = true;
  try {
    const answer = await api("POST", "/login/access-token", {
      form: { username: form.elements.username.value, password: form.elements.password.value },
    });
    sessionStorage.setItem(TOKEN_KEY, answer.access_token);
    form.reset();
    showScreen();
  } catch (exc) {
    error.textContent = exc.message;
    error.hidden = false;
  }
}

function showScreen() {
  $("login").hidden = true;
  $("screen").hidden = false;
  $("logout").hidden = false;
  startFeed();
}

// -- the live feed ---------------------------------------------------------------------------
// The page opens GET /events (through fetch, so the token stays in a header, never in a
// URL as EventSource would need), fetches its three views once, then only applies events.
// A reconnect sends Last-Event-ID and gets exactly what it missed; it fetches the views
// again only when the engine says "refetch" (too far behind, or the engine restarted).

let feed = null; // { stop: AbortController } while a stream is open or being opened
let lastEventId = null;
let lastLive = null;
const view = { workers: new Map(), refused: new Map(), queued: [], provisioners: [], tokens: new Map() };
const seen = { workers: 0, resources: 0, tokens: 0 }; // the newest event each view includes
const dirty = new Set();
let held = null; // events that came while the views were being fetched, applied after

function startFeed() {
  stopFeed();
  const stop = new AbortController();
  feed = { stop };
  runFeed(stop.signal);
}

function stopFeed() {
  if (feed) feed.stop.abort();
  feed = null;
}

const eventNumber = (id) => Number(String(id || "").split(".")[1] || 0);

async function runFeed(signal) {
  let needViews = lastEventId === null;
  while (!signal.aborted) {
    try {
      const headers = authorized(lastEventId ? { "Last-Event-ID": lastEventId } : {});
      const response = await fetch(`${API}/events`, { headers, signal, cache: "no-store" });
      const refused = refusal(response, response.ok ? null : await response.json().catch(() => null), "/events");
      if (refused) throw refused;
      if (!response.ok || !response.body) throw new Error(`${response.status} ${response.statusText}`);
      let closed = null; // the engine ended the stream: its credential no longer holds
      await readEvents(response.body.getReader(), (kind, id, data) => {
        if (kind === "closed") closed = (data && data.reason) || "the session ended";
        if (kind === "refetch") needViews = true;
        if (kind === "ready") {
          feedUp();
          if (needViews) {
            needViews = false;
            // Views that could not be fetched are fetched again on a new stream.
            loadViews().catch((exc) => {
              feedTrouble(exc);
              lastEventId = null;
              setTimeout(() => feed && feed.stop.signal === signal && startFeed(), RETRY_MS);
            });
          }
        } else if (kind !== "refetch" && kind !== "closed") {
          apply(kind, eventNumber(id), data);
        }
        if (id) lastEventId = id;
      });
      if (closed) throw new Unauthorized(`Your session has ended (${closed}): log in again.`);
      throw new Error("the engine closed the live feed");
    } catch (exc) {
      if (signal.aborted) return;
      if (exc instanceof Unauthorized) return showLogin(exc.message || "Your session has ended: log in again.");
      feedTrouble(exc);
      await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
    }
  }
}

// Server-sent events from a fetch body: blank-line separated blocks of "field: value".
async function readEvents(reader, onEvent) {
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const fields = {};
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        fields[name] = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      }
      if (fields.event || fields.data) onEvent(fields.event || "message", fields.id, fields.data ? JSON.parse(fields.data) : null);
    }
  }
}

async function loadViews() {
  held = [];
  let answers;
  try {
    answers = await Promise.all([
      getView("/workers", "workers"),
      getView("/workers/resources", "resources"),
      getView("/workers/tokens", "tokens"),
    ]);
  } catch (exc) {
    held = null;
    throw exc;
  }
  const [workers, resources, tokens] = answers;
  const waiting = held;
  held = null;
  view.workers = new Map(workers.filter((w) => w.status !== "needs upgrade").map((w) => [w.id, w]));
  view.refused = new Map(workers.filter((w) => w.status === "needs upgrade").map((w) => [w.name, w]));
  view.queued = resources.queued;
  view.provisioners = resources.provisioners;
  view.tokens = new Map(tokens.map((t) => [t.jti, t]));
  for (const section of ["workers", "queued", "provisioners", "tokens"]) dirty.add(section);
  for (const [kind, number, data] of waiting) apply(kind, number, data);
  render();
}

async function getView(path, name) {
  const response = await fetch(API + path, { headers: authorized(), cache: "no-store" });
  const refused = refusal(response, response.ok ? null : await response.json().catch(() => null), path);
  if (refused) throw refused;
  if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
  seen[name] = eventNumber(response.headers.get("X-Fluksio-Event-Id"));
  return response.json();
}

// One event: what it changes in the page's copy of the views, unless the view already
// holds it (an event older than the view's fetch).
function apply(kind, number, data) {
  if (held) return void held.push([kind, number, data]);
  const section = kind.split(".")[0];
  const viewOf = { worker: "workers", queue: "resources", provisioning: "resources", token: "tokens" }[section];
  if (!viewOf || number <= seen[viewOf]) return;
  if (kind === "worker.attached" || kind === "worker.changed") {
    view.workers.set(data.worker.id, data.worker);
    view.refused.delete(data.worker.name);
    dirty.add("workers");
  } else if (kind === "worker.gone") {
    view.workers.delete(data.id);
    dirty.add("workers");
  } else if (kind === "worker.refused") {
    view.refused.set(data.worker.name, data.worker);
    dirty.add("workers");
  } else if (kind === "queue") {
    view.queued = data.queued;
    dirty.add("queued");
  } else if (kind === "provisioning") {
    view.provisioners = data.provisioners;
    dirty.add("provisioners");
  } else if (section === "token") {
    view.tokens.set(data.token.jti, data.token);
    dirty.add("tokens");
  }
  scheduleRender();
}

let renderDue = false;
function scheduleRender() {
  if (renderDue) return;
  renderDue = true;
  setTimeout(render, 20); // a burst of events is drawn once
}

function byName(a, b) {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

function render() {
  renderDue = false;
  if (dirty.has("workers")) renderWorkers([...[...view.workers.values()].sort(byName), ...[...view.refused.values()].sort(byName)]);
  if (dirty.has("queued")) renderQueued(view.queued);
  if (dirty.has("provisioners")) renderProvisioners(view.provisioners);
  if (dirty.has("tokens")) renderTokens([...view.tokens.values()].sort((a, b) => (a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : 0)));
  dirty.clear();
}

function feedUp() {
  lastLive = Date.now();
  $("problem").hidden = true;
  $("live").textContent = "Live";
  $("live").className = "live ok";
}

function feedTrouble(exc) {
  // An engine restart lands here: keep trying, and say since when it has been away.
  if (exc instanceof Unauthorized) return showLogin(exc.message || "Your session has ended: log in again.");
  const since = lastLive ? ` since ${ago(new Date(lastLive).toISOString())}` : "";
  $("problem").textContent = `Cannot reach the engine${since}: ${exc.message}. The live feed is down; reconnecting every second.`;
  $("problem").hidden = false;
  $("live").textContent = "Feed down: reconnecting…";
  $("live").className = "live down";
}

// "3 s ago" grows while nothing happens, and a token expires without an event: both are
// redrawn here, with no request.
setInterval(() => {
  for (const node of document.querySelectorAll("time[datetime]")) {
    const iso = node.getAttribute("datetime");
    if (iso) node.textContent = ago(iso);
  }
  const now = Date.now();
  for (const token of view.tokens.values()) {
    if (token.status === "active" && Date.parse(token.expires_at) <= now) {
      token.status = "expired";
      dirty.add("tokens");
    }
  }
  if (dirty.size) scheduleRender();
}, RETRY_MS);

// -- sections ------------------------------------------------------------------------------

// The engine's --public-url when it has one (the screen may be open through a tunnel).
let publicOrigin = location.origin;

function attachCommand() {
  return `FLUKSIO_WORKER_TOKEN=<token> fluksio-worker --url ${publicOrigin}${API}/workers/attach`;
}

function renderWorkers(workers) {
  $("workers-count").textContent = workers.length ? `(${workers.length})` : "";
  if (!workers.length) {
    $("workers").replaceChildren(
      empty("No workers attached.", "Mint a token below, then run on the machine:", el("code", {}, attachCommand())),
    );
    return;
  }
  const rows = workers.map((worker) => {
    const upgrade = worker.status === "needs upgrade";
    const inventory = worker.inventory || {};
    const free = worker.free || {};
    return el(
      "tr",
      { "data-worker": worker.name, class: upgrade ? "needs-upgrade" : null },
      el(
        "td",
        {},
        el("strong", {}, worker.name),
        el("br"),
        upgrade ? null : chips(worker.labels),
        worker.host || worker.batch_job || worker.slurm_job_id
          ? el("div", { class: "muted small" }, [worker.host ? `host ${worker.host}` : null, worker.batch_job || (worker.slurm_job_id ? `Slurm job ${worker.slurm_job_id}` : null)].filter(Boolean).join(" · "))
          : null,
        worker.ends_at ? el("div", { class: "muted small" }, "job ends ", time(worker.ends_at)) : null,
      ),
      el("td", {}, badge(worker.status), upgrade ? el("p", { class: "muted small" }, worker.reason) : null),
      el("td", {}, `${worker.version || "unknown"} · protocol ${worker.protocol ?? "?"}`),
      el("td", {}, worker.python_version ? `Python ${worker.python_version}` : "", worker.python_version ? el("br") : null, el("span", { class: "muted small" }, worker.python || "—")),
      el(
        "td",
        { class: "meters" },
        upgrade
          ? el("span", { class: "muted" }, "refused: upgrade fluksio-worker")
          : [bar("cores", inventory.cpus, free.cpus, ""), bar("GPUs", inventory.gpus, free.gpus, ""), bar("memory", inventory.ram_mb, free.ram_mb, "MB")],
      ),
      el("td", {}, upgrade ? "—" : `${worker.in_flight - (worker.sent_ahead || 0)} of ${worker.parallel}` + (worker.sent_ahead ? ` +${worker.sent_ahead} ahead` : "")),
      el("td", {}, upgrade ? ["refused ", time(worker.refused_at)] : seenCell(worker)),
    );
  });
  $("workers").replaceChildren(table(["Worker", "Status", "Version", "Python", "Resources", "Calls", "Attached"], rows));
}

function renderQueued(queued) {
  $("queued-count").textContent = queued.length ? `(${queued.length})` : "";
  if (!queued.length) {
    $("queued").replaceChildren(empty("Nothing is waiting: every node call has a place to run."));
    return;
  }
  const rows = queued.map((call) =>
    el(
      "tr",
      { "data-call": call.call_id },
      el("td", {}, el("strong", {}, `${call.flow} / ${call.node}`), el("br"), el("span", { class: "muted small" }, `run ${call.run_id}`)),
      el("td", {}, call.worker ? chips([call.worker]) : el("span", { class: "muted" }, "any")),
      el("td", {}, time(call.queued_at)),
      el("td", { class: "reason" }, call.reason || "waiting for the next scheduling pass"),
    ),
  );
  $("queued").replaceChildren(table(["Node", "Wants", "Waiting since", "Why it waits"], rows));
}

function jobText(job) {
  if (!job) return el("span", { class: "muted" }, "none");
  const state = job.state ? `${job.state}${job.reason ? ` (${job.reason})` : ""}` : job.stage;
  return el("span", {}, job.job_id ? `job ${job.job_id}: ` : "", el("strong", {}, state), " since ", time(job.since));
}

function jobsText(profile) {
  const stages = Object.entries(profile.jobs_by_stage).map(([stage, count]) => `${count} ${stage}`);
  const each = `${profile.parallel} ${profile.parallel === 1 ? "call" : "calls"} at once on each`;
  return el(
    "span",
    {},
    el("strong", {}, `${profile.jobs.length} of ${profile.max_workers}`),
    stages.length ? ` (${stages.join(", ")})` : "",
    el("br"),
    el("span", { class: "muted small" }, each),
    // What the site's accounting allows (a QOS's limit), or why it runs none of them.
    profile.site_limit ? [el("br"), el("span", { class: "small site-limit" }, `site: ${profile.site_limit}`)] : null,
  );
}

function renderProvisioners(provisioners) {
  if (!provisioners.length) {
    $("provisioners").replaceChildren(
      empty("No provisioners configured.", "Put a provisioners.json in the engine's data directory to get machines from Slurm on demand."),
    );
    return;
  }
  const rows = [];
  for (const provisioner of provisioners) {
    for (const profile of provisioner.profiles) {
      const amounts = [
        profile.cpus ? `${profile.cpus} ${profile.cpus === 1 ? "core" : "cores"}` : null,
        profile.gpus ? `${profile.gpus} ${profile.gpus === 1 ? "GPU" : "GPUs"}` : null,
        profile.ram_mb ? `${profile.ram_mb} MB` : null,
      ].filter(Boolean);
      const error = profile.last_error;
      rows.push(
        el(
          "tr",
          { "data-profile": `${provisioner.name}/${profile.name}` },
          el("td", {}, el("strong", {}, `${provisioner.name}/${profile.name}`), el("br"), el("span", { class: "muted small" }, provisioner.type)),
          el("td", {}, chips(profile.labels), el("br"), el("span", { class: "muted small" }, amounts.join(", ") || "resources not set")),
          el("td", {}, jobsText(profile)),
          el(
            "td",
            {},
            profile.paused
              ? [el("span", { class: "badge paused" }, "paused"), el("br"), el("span", { class: "small" }, profile.paused)]
              : profile.path_down
              ? [el("span", { class: "badge path-down" }, "no way in"), el("br"), el("span", { class: "small" }, profile.path_down)]
              : profile.login_needed
                ? [el("span", { class: "badge login-needed" }, "login needed"), el("br"), el("code", { class: "small" }, profile.login_needed.replace(/^login needed: run /, ""))]
                : jobText(profile.outstanding),
          ),
          el(
            "td",
            { class: error ? "error-cell" : null },
            error ? [el("span", {}, error.message), el("br"), el("span", { class: "muted small" }, "at ", time(error.at), profile.retry_at ? `, next try ${until(profile.retry_at)}` : "")] : el("span", { class: "muted" }, "none"),
          ),
          el("td", {}, profile.workers.length ? profile.workers.map((w) => el("div", {}, w.name, w.job_id ? ` (job ${w.job_id})` : "")) : el("span", { class: "muted" }, "none")),
        ),
      );
    }
  }
  $("provisioners").replaceChildren(table(["Profile", "Brings", "Jobs", "Pending request", "Last error", "Workers it brought"], rows));
}

function renderTokens(tokens) {
  if (!tokens.length) {
    $("tokens").replaceChildren(empty("No worker tokens yet. Mint one above for each machine that should attach."));
    return;
  }
  const rows = tokens.map((token) =>
    el(
      "tr",
      { "data-token": token.name, "data-jti": token.jti },
      el("td", {}, el("strong", {}, token.name), el("br"), el("span", { class: "muted small" }, token.jti)),
      el("td", {}, chips(token.labels)),
      el("td", {}, badge(token.status), token.revoked_reason ? el("p", { class: "muted small" }, token.revoked_reason) : null),
      el("td", {}, time(token.created_at), token.created_by ? el("span", { class: "muted small" }, ` by ${token.created_by}`) : null),
      el("td", {}, token.expires_at ? token.expires_at.slice(0, 10) : "—"),
      el("td", {}, token.status === "active" ? el("button", { type: "button", class: "danger quiet", onclick: () => confirmRevoke(token) }, "Revoke") : null),
    ),
  );
  $("tokens").replaceChildren(table(["Token", "Labels", "Status", "Minted", "Expires", ""], rows));
}

// -- tokens: mint and revoke -----------------------------------------------------------------

async function mint(event) {
  event.preventDefault();
  const form = event.target;
  const error = $("mint-error");
  error.hidden = true;
  const labels = form.elements.labels.value.split(",").map((l) => l.trim()).filter(Boolean);
  try {
    const minted = await api("POST", "/workers/tokens", { json: { name: form.elements.name.value.trim(), labels } });
    form.reset();
    $("minted-token").value = minted.token;
    const labelFlag = minted.labels.length ? ` --labels ${minted.labels.join(",")}` : "";
    $("minted-usage").textContent = `${attachCommand()}${labelFlag}`;
    $("minted").hidden = false;
    $("copy-token").textContent = "Copy";
    $("minted-token").select();
  } catch (exc) {
    if (exc instanceof Unauthorized) return showLogin("Your session has ended: log in again.");
    error.textContent = exc.message;
    error.hidden = false;
  }
}

async function copyToken() {
  const field = $("minted-token");
  try {
    await navigator.clipboard.writeText(field.value);
  } catch {
    field.select();
    document.execCommand("copy");
  }
  $("copy-token").textContent = "Copied";
}

function dismissToken() {
  $("minted-token").value = "";
  $("minted").hidden = true;
}

function confirmRevoke(token) {
  const dialog = $("confirm-revoke");
  $("confirm-text").textContent = `Workers using "${token.name}" (${token.jti}) are disconnected at once and cannot attach with it again.`;
  dialog.returnValue = "";
  dialog.onclose = async () => {
    if (dialog.returnValue !== "revoke") return;
    try {
      await api("POST", `/workers/tokens/${encodeURIComponent(token.jti)}/revoke`);
    } catch (exc) {
      if (exc instanceof Unauthorized) return showLogin("Your session has ended: log in again.");
      $("problem").textContent = `Could not revoke ${token.name}: ${exc.message}`;
      $("problem").hidden = false;
    }
  };
  dialog.showModal();
}

// -- start -----------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  fetch(API + "/health", { cache: "no-store" })
    .then((response) => response.json())
    .then((health) => {
      if (health.public_url) publicOrigin = health.public_url;
    })
    .catch(() => {}); // the attach command then shows this page's own origin
  $("login-form").addEventListener("submit", logIn);
  $("mint-form").addEventListener("submit", mint);
  $("copy-token").addEventListener("click", copyToken);
  $("dismiss-token").addEventListener("click", dismissToken);
  $("logout").addEventListener("click", () => showLogin(""));
  if (sessionStorage.getItem(TOKEN_KEY)) showScreen();
  else showLogin("");
});
