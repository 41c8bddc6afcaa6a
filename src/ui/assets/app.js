// tagpin's dashboard: reads /api/repositories (and one repository's page) every few seconds
// and builds the page with DOM calls and textContent only: nothing from the API is ever parsed
// as HTML.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
let lastText = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function shortSha(sha) { return sha ? sha.slice(0, 12) : ""; }

function shortDigest(digest) {
  const [algo, hex] = String(digest).split(":");
  return hex ? `${algo}:${hex.slice(0, 12)}` : String(digest);
}

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const s = Math.max(0, Math.round(Date.now() / 1000 - seconds));
  return duration(s) + " ago";
}

function duration(s) {
  s = Math.max(0, Math.round(s));
  if (s < 90) return `${s}s`;
  if (s < 3600) return `${Math.round(s / 60)}m`;
  if (s < 172800) return `${Math.round(s / 360) / 10}h`;
  return `${Math.round(s / 8640) / 10}d`;
}

function when(seconds) {
  if (!seconds) return "";
  return new Date(seconds * 1000).toISOString().replace(".000Z", "Z");
}

function badge(kind, text) {
  const value = text || "none";
  return el("span", { class: `badge ${kind}-${value.replace(/[^a-z_-]/g, "")}` }, value);
}

function copyButton(value, label) {
  const button = el("button", { type: "button", class: "copy", "aria-label": `Copy ${label}`, "data-key": `copy ${label}` }, "copy");
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(value);
      button.textContent = "copied";
    } catch (e) {
      // No clipboard (a page not served over HTTPS or loopback): select it for Ctrl+C.
      const code = button.previousElementSibling;
      if (code) {
        code.textContent = value;
        const range = document.createRange();
        range.selectNodeContents(code);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
      }
      button.textContent = "selected: press Ctrl+C";
    }
    setTimeout(() => { button.textContent = "copy"; }, 1500);
  });
  return button;
}

function digestCell(digest) {
  return el("span", { class: "digest" },
    el("code", { title: digest }, shortDigest(digest)),
    copyButton(digest, `digest ${digest}`));
}

// The operator's Ready condition, when there is one.
function readiness(ready) {
  if (!ready) return null;
  return el("div", {}, badge("o", ready.ready ? "ok" : "error"), ` ${ready.ready ? "Ready" : "Not ready"}: ${ready.reason}`);
}

function pinnedCount(n) {
  return n === null || n === undefined ? "not verified yet" : String(n);
}

function setStatus(text) {
  document.getElementById("status").textContent = text;
}

async function fetchJson(path) {
  const answer = await fetch(path, { headers: { accept: "application/json" }, credentials: "same-origin" });
  const text = await answer.text();
  return { ok: answer.ok, status: answer.status, text };
}

function repoId() {
  const match = location.pathname.match(/^\/repositories\/([0-9a-f]+)$/);
  return match ? match[1] : null;
}

async function refresh() {
  const id = repoId();
  const path = id ? `/api/repositories/${id}` : "/api/repositories";
  let answer;
  try {
    answer = await fetchJson(path);
  } catch (e) {
    setStatus("Cannot reach tagpin; retrying.");
    return;
  }
  if (answer.text === lastText) return;
  lastText = answer.text;
  setStatus(`Updated ${new Date().toLocaleTimeString()}`);
  const main = document.getElementById("main");
  // What has the keyboard's focus keeps it across the update.
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.key : undefined;
  let content;
  if (!answer.ok) {
    let message = `Error ${answer.status}`;
    try { message = JSON.parse(answer.text).error || message; } catch (e) { /* keep */ }
    content = [el("h1", {}, id ? "Repository" : "Repositories"), el("p", { role: "alert" }, message)];
  } else {
    const data = JSON.parse(answer.text);
    content = id ? repositoryPage(data) : overviewPage(data);
  }
  main.replaceChildren(...content);
  if (focused) {
    const again = [...main.querySelectorAll("[data-key]")].find((e) => e.dataset.key === focused);
    if (again) again.focus();
  }
}

// ---- overview ----

function overviewPage(data) {
  const repos = data.repositories || [];
  document.title = "tagpin: repositories";
  if (repos.length === 0) {
    return [el("h1", {}, "Repositories"), el("p", {}, "No repository yet: the first pass has not finished.")];
  }
  const head = el("tr", {}, ...["Repository", "Branch and tip", "Stages", "Images pinned",
    "Change requests", "Holds", "Audit", "Last pass"].map((h) => el("th", { scope: "col" }, h)));
  const rows = repos.map((repo) => el("tr", {},
    el("td", {}, el("a", { href: `/repositories/${repo.id}`, "data-key": repo.id }, repo.key),
      repo.namespace ? el("div", { class: "muted" }, `namespace ${repo.namespace}`) : null),
    el("td", {}, repo.branch, " ", repo.tip ? el("code", { title: repo.tip }, shortSha(repo.tip)) : null),
    el("td", {}, ...repo.stages.map((s) => el("div", {}, `${s.name} `, badge("v", s.verdict)))),
    el("td", {}, pinnedCount(repo.images_pinned)),
    el("td", {}, repo.change_requests.length === 0 ? "none" :
      el("ul", {}, ...repo.change_requests.map((cr) => el("li", {}, `#${cr.number} `, badge("v", cr.verdict))))),
    el("td", {}, String(repo.holds.length)),
    el("td", {}, repo.audit ? badge("a", repo.audit.clean ? "clean" : "drift") : "not audited"),
    el("td", {}, repo.last_pass ? el("span", {}, badge("o", repo.last_pass.outcome), " ",
      ago(repo.last_pass.time)) : "none yet", readiness(repo.ready))));
  return [
    el("h1", {}, "Repositories"),
    el("table", {}, el("caption", { class: "muted" }, `${repos.length} repositor${repos.length === 1 ? "y" : "ies"}`),
      el("thead", {}, head), el("tbody", {}, ...rows)),
  ];
}

// ---- a repository ----

function repositoryPage(repo) {
  document.title = `tagpin: ${repo.key}`;
  const facts = el("dl", { class: "facts" },
    el("dt", {}, "Branch"), el("dd", {}, repo.branch, ` (${repo.mode} mode)`),
    el("dt", {}, "Tip"), el("dd", {}, repo.tip ? el("span", {}, el("code", { title: repo.tip }, shortSha(repo.tip)), copyButton(repo.tip, `commit ${repo.tip}`)) : "unknown"),
    el("dt", {}, "Images pinned"), el("dd", {}, pinnedCount(repo.images_pinned)),
    el("dt", {}, "Last pass"), el("dd", {}, repo.last_pass ? el("span", {}, badge("o", repo.last_pass.outcome), ` ${repo.last_pass.summary}, ${ago(repo.last_pass.time)}`) : "none yet"),
    repo.ready ? el("dt", {}, "Ready") : null, repo.ready ? el("dd", {}, readiness(repo.ready)) : null,
    el("dt", {}, "Audit"), el("dd", {}, repo.audit ? el("span", {}, badge("a", repo.audit.clean ? "clean" : "drift"), ` ${repo.audit.summary}`) : "not audited"));
  const stages = [];
  repo.stages.forEach((stage, i) => {
    if (i > 0) stages.push(el("div", { class: "arrow", "aria-hidden": "true" }, "→"));
    stages.push(stageCard(stage));
  });
  return [
    el("p", {}, el("a", { href: "/" }, "All repositories")),
    el("h1", {}, repo.key),
    facts,
    el("h2", {}, "Stages"),
    el("div", { class: "stages" }, ...stages),
    changeRequests(repo.change_requests),
    holds(repo.holds),
    timeline(repo.timeline || []),
    delivery(repo.delivery),
  ];
}

function stageCard(stage) {
  const card = el("section", { class: "stage", "aria-label": `Stage ${stage.name}` },
    el("h3", {}, stage.name, " ", badge("v", stage.verdict || "not verified")));
  if (stage.summary) card.append(el("p", { class: "summary" }, stage.summary));
  if (stage.commit) card.append(el("p", { class: "muted" }, "commit ", el("code", { title: stage.commit }, shortSha(stage.commit))));
  if (stage.gate) card.append(gate(stage.gate));
  if (stage.images.length === 0) {
    card.append(el("p", { class: "muted" }, "No verified image yet."));
    return card;
  }
  card.append(el("ul", { class: "images" }, ...stage.images.map((image) => el("li", {},
    el("h4", {}, image.workload, el("span", { class: "muted" }, ` ${image.container}`)),
    el("dl", { class: "facts" },
      el("dt", {}, "Image"), el("dd", {}, image.image, image.tag ? el("span", {}, " ", el("code", {}, image.tag)) : null),
      el("dt", {}, "Digest"), el("dd", {}, digestCell(image.digest)),
      el("dt", {}, "Since"), el("dd", {}, el("span", { title: when(image.since) }, ago(image.since))),
      el("dt", {}, "Verdict"), el("dd", {}, badge("v", image.verdict), el("div", { class: "summary" }, image.reason)),
      el("dt", {}, "Pods on digest"), el("dd", {}, `${image.pods_on_digest} / ${image.pods_total}`))))));
  return card;
}

function gate(g) {
  const box = el("div", { class: "gate" },
    el("p", {}, `Promotion from ${g.from}: `, badge("g", g.state)),
    el("p", {}, g.reason));
  if (g.soak_seconds > 0) {
    const left = g.remaining_seconds === null || g.remaining_seconds === undefined
      ? (g.state === "open" ? 0 : g.soak_seconds) : g.remaining_seconds;
    const done = Math.max(0, g.soak_seconds - left);
    box.append(el("p", {}, el("label", {}, "Soak ",
      el("progress", { max: g.soak_seconds, value: done }), ` ${duration(left)} left of ${duration(g.soak_seconds)}`)));
  }
  return box;
}

/** A section titled `title` listing `items`, each an `li` of what `row` makes of it, or
 * saying `none` when there are none. */
function listSection(title, none, items, row) {
  const section = el("section", { "aria-label": title }, el("h2", {}, title));
  section.append(items.length === 0
    ? el("p", { class: "muted" }, none)
    : el("ul", {}, ...items.map((item) => el("li", {}, ...row(item)))));
  return section;
}

function changeRequests(list) {
  return listSection("Change requests in flight", "None open.", list, (cr) => [
    safeLink(cr.url, `#${cr.number} ${cr.title}`), " ",
    cr.stage ? `(promotion into ${cr.stage}) ` : "",
    badge("v", cr.verdict || "not verified"),
    cr.summary ? el("div", { class: "summary" }, cr.summary) : null]);
}

function holds(list) {
  return listSection("Holds", "Nothing held.", list, (h) => [
    `${h.stage}: ${h.image} in ${h.file}:${h.line} held from `, el("code", { title: h.would_be }, shortDigest(h.would_be)),
    el("div", { class: "summary" }, h.reason, h.commit ? ` (commit ${shortSha(h.commit)})` : "")]);
}

// Only http(s) addresses become links: anything else is shown as text.
function safeLink(url, text) {
  try {
    const parsed = new URL(url);
    if (parsed.protocol === "https:" || parsed.protocol === "http:") return el("a", { href: parsed.href }, text);
  } catch (e) { /* not a URL */ }
  return el("span", {}, text);
}

function timeline(events) {
  const section = el("section", { "aria-label": "Timeline" }, el("h2", {}, "Timeline"));
  if (events.length === 0) {
    section.append(el("p", { class: "muted" }, "No events yet."));
    return section;
  }
  section.append(el("ol", { class: "timeline" }, ...events.slice(0, 50).map((e, i) => {
    const older = events[i + 1];
    return el("li", {},
      el("time", { datetime: when(e.time) }, when(e.time)), " ",
      badge("o", e.kind), ` ${e.stage}`,
      e.image ? ` ${e.image}` : "",
      e.digest ? el("span", {}, " ", el("code", { title: e.digest }, shortDigest(e.digest))) : null,
      e.commit ? el("span", {}, " commit ", el("code", { title: e.commit }, shortSha(e.commit))) : null,
      e.change_request ? el("span", {}, " ", e.change_request.url ? safeLink(e.change_request.url, `#${e.change_request.number}`) : `#${e.change_request.number}`) : null,
      older ? el("span", { class: "muted" }, ` (${duration(e.time - older.time)} after the previous)`) : null,
      e.reason ? el("div", { class: "summary" }, e.reason) : null);
  })));
  return section;
}

// ---- delivery panel ----

function delivery(report) {
  const section = el("section", { class: "panel", "aria-label": "Delivery" }, el("h2", {}, "Delivery, last 30 days"));
  if (!report) {
    section.append(el("p", { class: "muted" }, "No delivery figures yet."));
    return section;
  }
  const head = el("tr", {}, ...["Stage", "Deployments", "Failures", "Change failure rate", "Lead time (median / p90)", "Time to restore (median)"]
    .map((h) => el("th", { scope: "col" }, h)));
  const seconds = (v) => (v === null || v === undefined ? "–" : duration(v));
  const rows = (report.stages || []).map((s) => el("tr", {},
    el("td", {}, s.name), el("td", {}, String(s.deployments)), el("td", {}, String(s.failures)),
    el("td", {}, s.change_failure_rate === null || s.change_failure_rate === undefined ? "–" : `${Math.round(s.change_failure_rate * 100)}%`),
    el("td", {}, `${seconds(s.lead_time_seconds && s.lead_time_seconds.median)} / ${seconds(s.lead_time_seconds && s.lead_time_seconds.p90)}`),
    el("td", {}, seconds(s.time_to_restore_seconds && s.time_to_restore_seconds.median))));
  section.append(el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)));
  const changes = report.changes || [];
  const leads = changes.filter((c) => c.created && c.converged)
    .map((c) => ({ label: `${c.stage} ${shortDigest(c.digest)}`, value: (Date.parse(c.converged) - Date.parse(c.created)) / 1000 }));
  const perDay = new Map();
  for (const c of changes) {
    if (!c.pinned) continue;
    const day = c.pinned.slice(0, 10);
    perDay.set(day, (perDay.get(day) || 0) + 1);
  }
  const days = [...perDay.entries()].sort().map(([day, n]) => ({ label: day, value: n }));
  section.append(el("div", { class: "charts" },
    barChart("Lead time per change", leads, duration),
    barChart("Deployments per day", days, String)));
  return section;
}

function barChart(title, points, format) {
  const width = 420, height = 160, pad = 24;
  const figure = el("figure", { class: "chart" });
  const caption = el("figcaption", {}, title);
  if (points.length === 0) {
    figure.append(caption, el("p", { class: "muted" }, "No data."));
    return figure;
  }
  const max = Math.max(...points.map((p) => p.value), 1);
  const step = (width - pad) / points.length;
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${title}: ${points.map((p) => `${p.label} ${format(p.value)}`).join(", ")}` });
  chart.append(svg("line", { x1: pad, y1: height - pad, x2: width, y2: height - pad, stroke: "#4a5360" }));
  points.forEach((p, i) => {
    const h = ((height - 2 * pad) * p.value) / max;
    const bar = svg("rect", { x: pad + i * step + 2, y: height - pad - h, width: Math.max(2, step - 4), height: h, fill: "#0a4f8a" });
    bar.append(svg("title", {}, `${p.label}: ${format(p.value)}`));
    chart.append(bar);
  });
  chart.append(svg("text", { x: 2, y: 12, "font-size": 11, fill: "#1b1f24" }, format(max)));
  figure.append(caption, chart);
  return figure;
}

document.addEventListener("DOMContentLoaded", () => {
  refresh();
  setInterval(refresh, POLL_MS);
});
