// Keyboard-first triage for the Vigil reviewer UI. Served as a static file: the
// Content-Security-Policy forbids inline scripts. No framework, no build step.
(function () {
  "use strict";

  function rows() { return Array.prototype.slice.call(document.querySelectorAll("tr.item-row, tr.run-row")); }

  // ---- Conversation | Trace: one panel at a time once the script runs (both show without it) ----
  function viewTabs() { return Array.prototype.slice.call(document.querySelectorAll("#view-tabs [role=tab]")); }

  function currentView() {
    var trace = document.getElementById("panel-trace");
    return trace && !trace.hidden ? "trace" : "conversation";
  }

  function showView(name, focusTab) {
    var tabs = viewTabs();
    if (!tabs.length) { return false; }
    tabs.forEach(function (tab) {
      var on = tab.getAttribute("data-view") === name;
      tab.setAttribute("aria-selected", on ? "true" : "false");
      tab.setAttribute("tabindex", on ? "0" : "-1");
      var panel = document.getElementById(tab.getAttribute("aria-controls"));
      if (panel) { panel.hidden = !on; }
      if (on && focusTab) { tab.focus({ preventScroll: true }); }
    });
    document.body.setAttribute("data-view", name);
    return true;
  }

  // v: the other panel; on the trace the selected span (else the first) takes the focus, so the arrow keys walk the tree
  function toggleView() {
    if (!viewTabs().length) { return false; }
    if (currentView() === "trace") {
      showView("conversation", false);
      if (window.location.hash && spanById(decodeURIComponent(window.location.hash.slice(1))) && window.history.replaceState) {
        window.history.replaceState(null, "", window.location.pathname + window.location.search);
      }
      return true;
    }
    showView("trace", false);
    var row = currentSpan() || spanRows()[0];
    if (row) { showSpan(row, true, true); }
    return true;
  }

  // ---- span tree: selection shows the span's details; the URL fragment is the span id ----
  function spanRows() { return Array.prototype.slice.call(document.querySelectorAll(".span-row")); }

  function currentSpan() { return document.querySelector(".span-row.selected"); }

  function showSpan(row, focus, fromUser) {
    if (!row) { return; }
    if (currentView() !== "trace") { showView("trace", false); }
    spanRows().forEach(function (r) {
      var on = r === row;
      r.classList.toggle("selected", on);
      r.setAttribute("aria-selected", on ? "true" : "false");
      r.setAttribute("tabindex", on ? "0" : "-1");
    });
    var id = row.getAttribute("data-span");
    document.querySelectorAll(".span-detail").forEach(function (d) {
      d.hidden = d.getAttribute("data-span") !== id;
    });
    var hint = document.getElementById("span-hint");
    if (hint) { hint.hidden = true; }
    if (focus) { row.focus({ preventScroll: true }); }
    row.scrollIntoView({ block: "nearest" });
    if (fromUser && window.history && window.history.replaceState) {
      window.history.replaceState(null, "", "#" + id);
    }
  }

  function moveSpan(delta) {
    var all = spanRows();
    if (!all.length) { return false; }
    var index = all.indexOf(currentSpan());
    index = index < 0 ? 0 : Math.max(0, Math.min(all.length - 1, index + delta));
    showSpan(all[index], true, true);
    return true;
  }

  function spanById(id) {
    if (!id) { return null; }
    var el = document.getElementById(id);
    return el && el.classList.contains("span-row") ? el : null;
  }

  function fromHash() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    var row = spanById(id);
    if (row) { showSpan(row, true, false); }
  }

  function parentSpan() {
    var row = currentSpan();
    if (!row) { return false; }
    var detail = document.getElementById("detail-" + row.getAttribute("data-span"));
    var link = detail && detail.querySelector("dd a[href^='#']");
    var parent = link ? spanById(link.getAttribute("href").slice(1)) : null;
    if (parent) { showSpan(parent, true, true); }
    return true;
  }

  function childSpan() {
    var row = currentSpan();
    if (!row) { return false; }
    var level = Number(row.getAttribute("aria-level"));
    var next = row.nextElementSibling;
    if (next && Number(next.getAttribute("aria-level")) > level) { showSpan(next, true, true); }
    return true;
  }

  var evidenceIndex = -1;
  function nextEvidence() {
    var links = Array.prototype.slice.call(document.querySelectorAll("a.ev-span"));
    if (!links.length) { return false; }
    evidenceIndex = (evidenceIndex + 1) % links.length;
    var row = spanById(links[evidenceIndex].getAttribute("href").slice(1));
    if (row) { showSpan(row, true, true); }
    return true;
  }

  function copySpan(button) {
    var row = currentSpan();
    if (!button && !row) { return false; }
    var id = button ? button.getAttribute("data-span") : row.getAttribute("data-span");
    var detail = document.getElementById("detail-" + id);
    var trace = document.body.getAttribute("data-trace");
    if (!detail || !trace) { return false; }
    var done = function () {
      var mark = detail.querySelector(".copied");
      if (mark) { mark.hidden = false; window.setTimeout(function () { mark.hidden = true; }, 1500); }
      document.body.setAttribute("data-copied", id);
    };
    fetch("/runs/" + encodeURIComponent(trace) + "/spans/" + encodeURIComponent(id) + ".json", { credentials: "same-origin" })
      .then(function (response) { return response.text(); })
      .then(function (text) {
        if (navigator.clipboard && navigator.clipboard.writeText) {
          return navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text); done(); });
        }
        fallbackCopy(text);
        done();
        return null;
      });
    return true;
  }

  function fallbackCopy(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); } catch (e) { /* nothing more to try */ }
    document.body.removeChild(area);
  }

  function openAllFolds() {
    var folds = Array.prototype.slice.call(document.querySelectorAll("details.fold"));
    if (!folds.length) { return false; }
    var open = folds.some(function (d) { return !d.open; });
    folds.forEach(function (d) { d.open = open; });
    return true;
  }

  function toggleHelp(force) {
    var help = document.getElementById("shortcuts");
    if (!help) { return false; }
    help.hidden = force === undefined ? !help.hidden : !force;
    return true;
  }

  function follow(id) {
    var link = document.getElementById(id);
    if (!link) { return false; }
    window.location.href = link.getAttribute("href");
    return true;
  }

  // ---- session page: one <details> per turn; the URL fragment is the turn (#turn-3) ----
  function turns() { return Array.prototype.slice.call(document.querySelectorAll("details.session-turn")); }

  function currentTurnIndex() {
    return turns().findIndex(function (t) { return t.classList.contains("current"); });
  }

  function showTurn(turn, fromUser) {
    if (!turn) { return; }
    if (currentView() !== "conversation") { showView("conversation", false); }
    turns().forEach(function (t) { t.classList.toggle("current", t === turn); });
    turn.open = true;
    var summary = turn.querySelector("summary");
    if (summary) { summary.focus({ preventScroll: true }); }
    turn.scrollIntoView({ block: "start" });
    if (fromUser && window.history && window.history.replaceState) {
      window.history.replaceState(null, "", "#" + turn.id);
    }
  }

  function moveTurn(delta) {
    var all = turns();
    if (!all.length) { return false; }
    var index = currentTurnIndex();
    index = index < 0 ? (delta > 0 ? 0 : all.length - 1) : Math.max(0, Math.min(all.length - 1, index + delta));
    showTurn(all[index], true);
    return true;
  }

  function turnFromHash() {
    var el = document.getElementById(decodeURIComponent(window.location.hash.slice(1)));
    if (el && el.classList.contains("session-turn")) { showTurn(el, false); }
  }

  // On a session item the verdict judges the session, or the turn chosen with t (the current one): the
  // form's hidden target fields follow, and the label and the turn's mark say which. textContent only.
  function toggleTarget() {
    var target = document.getElementById("target");
    var trace = document.getElementById("target-trace");
    var label = document.getElementById("target-label");
    if (!target || !trace || !label) { return false; }
    var current = turns()[currentTurnIndex()];
    var judged = document.querySelector("details.session-turn.judged");
    var button = document.getElementById("target-toggle-text");
    if (!current || (target.value === "turn" && judged === current)) {
      if (button) { button.textContent = "Judge the current turn"; }
      target.value = "session";
      trace.value = "";
      label.textContent = label.getAttribute("data-session");
      label.classList.remove("turn");
      if (judged) { judged.classList.remove("judged"); }
      return true;
    }
    if (judged) { judged.classList.remove("judged"); }
    current.classList.add("judged");
    target.value = "turn";
    trace.value = current.getAttribute("data-trace");
    label.textContent = "turn " + current.getAttribute("data-turn") + " only (run " + trace.value.slice(0, 12) + ")";
    label.classList.add("turn");
    if (button) { button.textContent = "Judge the session again"; }
    return true;
  }

  // j/k (and n/p on the session page, where no verdict form takes them) move between turns; o, r, t
  function onSessionKey(key, page) {
    var all = turns();
    if (!all.length) { return false; }
    var current = all[currentTurnIndex()];
    if (key === "t" && page === "item") {
      if (!current && document.getElementById("target")) { showTurn(all[0], true); }  // no turn chosen yet: the first
      return toggleTarget();
    }
    if (key === "j" || (key === "n" && page === "session")) { return moveTurn(1); }
    if (key === "k" || (key === "p" && page === "session")) { return moveTurn(-1); }
    if (key === "o" && current) { current.open = !current.open; return true; }
    if (key === "r" && current) { window.location.href = current.getAttribute("data-href"); return true; }
    return false;
  }

  var pendingG = false;

  function select(index) {
    var all = rows();
    if (!all.length) { return; }
    index = Math.max(0, Math.min(all.length - 1, index));
    all.forEach(function (row, i) { row.classList.toggle("selected", i === index); });
    all[index].scrollIntoView({ block: "nearest" });
  }

  function selectedIndex() {
    return rows().findIndex(function (row) { return row.classList.contains("selected"); });
  }

  function submit(id) {
    var form = document.getElementById(id);
    if (!form) { return false; }
    if (form.requestSubmit) { form.requestSubmit(); } else { form.submit(); }
    return true;
  }

  function check(id) {
    var box = document.getElementById(id);
    if (box) { box.checked = true; }
  }

  function toggleCategory(n) {
    var box = document.querySelector('input.category[data-key="' + n + '"]');
    if (!box) { return; }
    box.checked = !box.checked;
    if (box.checked) { check("verdict-fail"); }
  }

  function submitVerdict() {
    var form = document.getElementById("verdict-form");
    if (!form) { return false; }
    if (!form.querySelector('input[name="verdict"]:checked')) {
      form.classList.add("needs-verdict");
      return true;
    }
    return submit("verdict-form");
  }

  function onField(event) {
    var target = event.target;
    if (event.key === "Escape") { target.blur(); event.preventDefault(); return; }
    if (event.key === "Enter" && !event.shiftKey && target.tagName === "TEXTAREA" && target.form &&
        target.form.id === "verdict-form") {
      event.preventDefault();
      submitVerdict();
    }
  }

  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var target = event.target;
    if (target.isContentEditable || (target.matches && target.matches("input, textarea, select"))) { onField(event); return; }
    var page = document.body.getAttribute("data-page");
    var key = event.key;
    var handled = true;
    var help = document.getElementById("shortcuts");
    if (key === "?") { toggleHelp(); event.preventDefault(); return; }
    if (key === "Escape" && help && !help.hidden) { toggleHelp(false); event.preventDefault(); return; }
    if (pendingG) {
      pendingG = false;
      var dest = { q: "/queue", r: "/runs", e: "/sessions", s: "/stats" }[key];
      if (dest) { window.location.href = dest; event.preventDefault(); }
      return;
    }
    if (key === "g") { pendingG = true; event.preventDefault(); return; }
    if (onSessionKey(key, page)) { event.preventDefault(); return; }
    var onTab = target.getAttribute && target.getAttribute("role") === "tab";
    if (onTab && (key === "Enter" || key === " ")) { return; }  // the button's own click switches
    if (onTab && (key === "ArrowLeft" || key === "ArrowRight")) {
      showView(currentView() === "trace" ? "conversation" : "trace", true);
      event.preventDefault();
      return;
    }
    if (key === "v" && toggleView()) { event.preventDefault(); return; }
    var inTree = target.classList && target.classList.contains("span-row");
    if (inTree && (key === "ArrowDown" || key === "ArrowUp")) { moveSpan(key === "ArrowDown" ? 1 : -1); event.preventDefault(); return; }
    // Enter in the tree still submits a verdict being given (the arrows already show each span); Space selects
    if (inTree && key === "Enter" && page === "item" && document.getElementById("verdict-form")) { submitVerdict(); event.preventDefault(); return; }
    if (inTree && (key === "Enter" || key === " ")) { showSpan(target, true, true); event.preventDefault(); return; }
    var hasSpans = spanRows().length > 0;
    if (hasSpans && (key === "j" || key === "k")) { moveSpan(key === "j" ? 1 : -1); }
    else if (hasSpans && key === "h") { handled = parentSpan(); }
    else if (hasSpans && key === "l") { handled = childSpan(); }
    else if (key === "e") { handled = nextEvidence(); }
    else if (key === "y") { handled = copySpan(null); }
    else if (key === "a") { handled = openAllFolds(); }
    else if (key === "/" && page === "runs") { var box = document.getElementById("trace-search"); if (box) { box.focus(); box.select(); } else { handled = false; } }
    else if (key === "n" && (page === "runs" || page === "sessions")) { handled = follow("next-page"); }
    else if (key === "s" && page === "runs") {
      var selected = rows()[selectedIndex()];
      var form = selected && selected.querySelector("form.send-review");
      if (form) { if (form.requestSubmit) { form.requestSubmit(); } else { form.submit(); } } else { handled = false; }
    }
    else if (key === "s" && page === "run") { handled = submit("send-to-review"); }
    else if (key === "j") { select(selectedIndex() + 1); }
    else if (key === "k") { select(selectedIndex() - 1); }
    else if (key === "c") { handled = submit("claim-next"); }
    else if (key === "p") { check("verdict-pass"); document.querySelectorAll("input.category").forEach(function (b) { b.checked = false; }); }
    else if (key === "f") { check("verdict-fail"); }
    else if (/^[1-9]$/.test(key)) { toggleCategory(key); }
    else if (key === "n") { var notes = document.getElementById("notes"); if (notes) { notes.focus(); } else { handled = false; } }
    else if (key === "Enter") {
      if (page === "item") {
        // after "submit and next" the next item opens unclaimed and says Enter claims it: so it does, whether
        // or not the browser has applied the button's autofocus yet
        var claim = document.getElementById("claim-item-button");
        if (!document.getElementById("verdict-form") && claim && claim.hasAttribute("autofocus")) { handled = submit("claim-item"); }
        else { handled = submitVerdict(); }
      }
      else if (page === "queue" || page === "runs" || page === "sessions") {
        var row = rows()[selectedIndex()];
        if (row) { window.location.href = row.getAttribute("data-href"); } else { handled = false; }
      } else { handled = false; }
    } else { handled = false; }
    if (handled) { event.preventDefault(); }
  }

  document.addEventListener("keydown", onKey);
  document.addEventListener("DOMContentLoaded", function () {
    var page = document.body.getAttribute("data-page");
    if (page === "queue" || page === "runs" || page === "sessions") { select(0); }
    rows().forEach(function (row, i) {
      row.addEventListener("click", function () { select(i); });
    });
    spanRows().forEach(function (row) {
      row.addEventListener("click", function () { showSpan(row, true, true); });
    });
    document.querySelectorAll("button.copy-json").forEach(function (button) {
      button.addEventListener("click", function () { copySpan(button); });
    });
    document.querySelectorAll("a.ev-span, a.to-span, .span-detail dd a").forEach(function (link) {
      link.addEventListener("click", function (event) {
        var row = spanById(link.getAttribute("href").slice(1));
        if (row) { event.preventDefault(); showSpan(row, true, true); }
      });
    });
    var tabs = document.getElementById("view-tabs");
    if (tabs) {
      tabs.hidden = false;
      showView("conversation", false);
      viewTabs().forEach(function (tab) {
        tab.addEventListener("click", function () {
          if (tab.getAttribute("data-view") !== currentView()) { toggleView(); }
        });
      });
    }
    window.addEventListener("hashchange", fromHash);
    fromHash();
    var targetToggle = document.getElementById("target-toggle");
    if (targetToggle) { targetToggle.addEventListener("click", function () { toggleTarget(); }); }
    if (turns().length) {
      turns().forEach(function (turn) {
        turn.querySelector("summary").addEventListener("click", function () {
          turns().forEach(function (t) { t.classList.toggle("current", t === turn); });
        });
      });
      window.addEventListener("hashchange", turnFromHash);
      turnFromHash();
    }
  });
}());
