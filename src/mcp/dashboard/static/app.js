// The dashboard: asks for the bearer token once, keeps it in sessionStorage, and polls the
// snapshot at most once a second. Every value is written with textContent: owners and
// purposes are text agents chose, never markup.
"use strict";

(function () {
  const TOKEN_KEY = "quorumlock.token";
  const SNAPSHOT = "/dashboard/api/snapshot";
  const EVERY_MS = 1000;

  const $ = (id) => document.getElementById(id);
  let cursor = null;       // the page shown; null: the first
  let pageNumber = 1;
  let nextCursor = null;
  let timer = null;
  let generation = 0;      // polls of an older token or page are dropped

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  function showLogin(message) {
    $("board").hidden = true;
    $("login").hidden = false;
    $("sign-out").hidden = true;
    $("login-error").textContent = message || "";
    $("quorum").textContent = "not connected";
    $("quorum").className = "badge";
    $("token").focus();
  }

  function showBoard() {
    $("login").hidden = true;
    $("board").hidden = false;
    $("sign-out").hidden = false;
  }

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text === undefined || text === null ? "" : String(text);
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function fill(tableId, items, render, empty) {
    const body = $(tableId).tBodies[0];
    const rows = [];
    for (const item of items) {
      const tr = document.createElement("tr");
      render(tr, item);
      rows.push(tr);
    }
    if (rows.length === 0) {
      const tr = document.createElement("tr");
      const td = cell(tr, empty, "muted");
      td.colSpan = $(tableId).tHead.rows[0].cells.length;
      rows.push(tr);
    }
    body.replaceChildren(...rows);
  }

  function duration(ms) {
    if (ms === undefined || ms === null) return "";
    if (ms < 1000) return ms + " ms";
    const s = Math.ceil(ms / 1000);
    if (s < 120) return s + " s";
    const m = Math.floor(s / 60);
    return m + " min " + (s % 60) + " s";
  }

  function renderGroups(health) {
    const badge = $("quorum");
    badge.textContent = (health.quorum_available ? "quorum available" : "NO QUORUM") +
      ": " + health.voting + " of " + health.groups.length + " groups vote, " + health.quorum + " needed";
    badge.className = "badge " + (health.quorum_available ? "ok" : "bad");
    fill("groups", health.groups, (tr, g) => {
      cell(tr, g.group, "name");
      cell(tr, g.state, "state state-" + g.state.replace(/ /g, "-"));
      cell(tr, g.votes ? "yes" : "no");
      cell(tr, g.quarantine_left_ms !== undefined ? duration(g.quarantine_left_ms) : "");
      cell(tr, g.policy_max_ttl_ms !== undefined
        ? "max TTL " + duration(g.policy_max_ttl_ms) + ", write window " + duration(g.policy_write_window_ms)
        : "none");
      cell(tr, g.master);
      cell(tr, g.latency_ms !== undefined ? g.latency_ms.toFixed(1) + " ms" : "");
      cell(tr, g.error, "error-text");
    }, "no groups");
  }

  function renderLocks(page) {
    fill("locks", page.locks, (tr, l) => {
      cell(tr, l.resource, "name");
      cell(tr, l.owner);
      cell(tr, l.purpose);
      cell(tr, duration(l.remaining_ms));
      cell(tr, l.fencing_token, "fence");
      const holders = l.split
        ? "SPLIT: " + l.holders.map((h) =>
            (h.owner || "unnamed") + " (fence " + (h.fencing_token ?? "?") + ") on " + h.groups.join(", ") +
            (h.majority ? ", majority" : "")).join("; ")
        : "";
      cell(tr, holders, l.split ? "bad-text" : "");
    }, page.error ? "" : "no locks held");
    $("locks-error").textContent = page.error ? "Cannot list the locks: " + page.error : "";
    $("locks-count").textContent = "(page " + pageNumber + ", " + page.locks.length + " shown)";
    nextCursor = page.next_cursor || null;
    $("next-page").disabled = nextCursor === null;
    $("first-page").disabled = cursor === null;
    $("page-label").textContent = nextCursor ? "more locks on the next page" : "";
    fill("semaphores", page.semaphores, (tr, s) => {
      cell(tr, s.name, "name");
      cell(tr, s.used + " of " + (s.permits ?? "?"));
      cell(tr, s.holders.join(", "));
    }, "no permits held");
  }

  function renderWaiters(waiters) {
    fill("waiters", waiters, (tr, w) => {
      cell(tr, w.resource, "name");
      cell(tr, w.waiting);
    }, "nobody waits here");
  }

  function renderTimeline(events) {
    const newestFirst = events.slice().reverse();
    fill("timeline", newestFirst, (tr, e) => {
      cell(tr, new Date(e.at).toLocaleTimeString(), "time");
      cell(tr, e.kind.replace(/_/g, " "), "kind kind-" + e.kind);
      cell(tr, e.subject, "name");
      cell(tr, e.detail);
    }, "nothing yet");
  }

  async function poll() {
    const mine = generation;
    const secret = token();
    if (!secret) return showLogin("");
    const url = cursor === null ? SNAPSHOT : SNAPSHOT + "?cursor=" + encodeURIComponent(cursor);
    try {
      const response = await fetch(url, {
        headers: { "Authorization": "Bearer " + secret },
        cache: "no-store",
        credentials: "omit",
        referrerPolicy: "no-referrer",
      });
      if (mine !== generation) return;
      if (response.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        return showLogin("The server refused this token.");
      }
      if (!response.ok) throw new Error("HTTP " + response.status + ": " + (await response.text()));
      const snapshot = await response.json();
      if (mine !== generation) return;
      showBoard();
      $("poll-error").textContent = "";
      renderGroups(snapshot.health);
      renderLocks(snapshot.page);
      renderWaiters(snapshot.waiters);
      renderTimeline(snapshot.timeline);
      $("updated").textContent = "updated " + new Date(snapshot.generated_at).toLocaleTimeString() +
        " · server " + snapshot.server_version;
    } catch (error) {
      if (mine !== generation) return;
      $("poll-error").textContent = "Cannot reach the server: " + error.message;
    }
    timer = setTimeout(poll, EVERY_MS);
  }

  function restart() {
    generation += 1;
    clearTimeout(timer);
    poll();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("login-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const typed = $("token").value.trim();
      if (!typed) return;
      sessionStorage.setItem(TOKEN_KEY, typed);
      $("token").value = "";
      restart();
    });
    $("sign-out").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      generation += 1;
      clearTimeout(timer);
      showLogin("");
    });
    $("next-page").addEventListener("click", () => {
      if (nextCursor === null) return;
      cursor = nextCursor;
      pageNumber += 1;
      restart();
    });
    $("first-page").addEventListener("click", () => {
      cursor = null;
      pageNumber = 1;
      restart();
    });
    if (token()) restart(); else showLogin("");
  });
})();
