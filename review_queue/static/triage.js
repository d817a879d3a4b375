// Keyboard-first triage for the Vigil reviewer UI. Served as a static file: the
// Content-Security-Policy forbids inline scripts. No framework, no build step.
(function () {
  "use strict";

  function rows() { return Array.prototype.slice.call(document.querySelectorAll("tr.item-row")); }

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
    if (target.matches && target.matches("input, textarea, select")) { onField(event); return; }
    var page = document.body.getAttribute("data-page");
    var key = event.key;
    var handled = true;
    if (key === "j") { select(selectedIndex() + 1); }
    else if (key === "k") { select(selectedIndex() - 1); }
    else if (key === "c") { handled = submit("claim-next"); }
    else if (key === "p") { check("verdict-pass"); document.querySelectorAll("input.category").forEach(function (b) { b.checked = false; }); }
    else if (key === "f") { check("verdict-fail"); }
    else if (/^[1-9]$/.test(key)) { toggleCategory(key); }
    else if (key === "n") { var notes = document.getElementById("notes"); if (notes) { notes.focus(); } else { handled = false; } }
    else if (key === "Enter") {
      if (page === "item") { handled = submitVerdict(); }
      else if (page === "queue") {
        var row = rows()[selectedIndex()];
        if (row) { window.location.href = row.getAttribute("data-href"); } else { handled = false; }
      } else { handled = false; }
    } else { handled = false; }
    if (handled) { event.preventDefault(); }
  }

  document.addEventListener("keydown", onKey);
  document.addEventListener("DOMContentLoaded", function () {
    if (document.body.getAttribute("data-page") === "queue") { select(0); }
    rows().forEach(function (row, i) {
      row.addEventListener("click", function () { select(i); });
    });
  });
}());
