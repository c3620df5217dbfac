// Conveyor dashboard: the little behaviour htmx does not give us. No inline scripts
// (the Content-Security-Policy forbids them) and no eval.
(function () {
  "use strict";
  var KEY = "conveyor.live.paused";

  function paused() {
    try { return window.localStorage.getItem(KEY) === "1"; } catch (e) { return false; }
  }

  function showToggle() {
    document.querySelectorAll("[data-live-toggle]").forEach(function (button) {
      var p = paused();
      button.textContent = p ? "Resume live refresh" : "Pause live refresh";
      button.setAttribute("aria-pressed", p ? "true" : "false");
      button.classList.toggle("btn-go", p);
    });
  }

  // Polling stays scheduled; while paused each poll is simply not sent.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-live") && paused()) {
      event.preventDefault();
    }
  });

  document.addEventListener("click", function (event) {
    var target = event.target;
    if (!(target instanceof Element)) { return; }
    if (target.closest("[data-live-toggle]")) {
      try { window.localStorage.setItem(KEY, paused() ? "0" : "1"); } catch (e) { /* private mode */ }
      showToggle();
    }
  });

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target instanceof HTMLInputElement && target.hasAttribute("data-select-all")) {
      var form = target.form;
      if (!form) { return; }
      form.querySelectorAll("input[name=ids]").forEach(function (box) { box.checked = target.checked; });
    }
  });

  document.addEventListener("DOMContentLoaded", showToggle);
})();
