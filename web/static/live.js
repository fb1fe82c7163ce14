// sortie's dashboard: live refresh and row selection. The pages work
// without this script; with it, the parts of a page marked data-live are
// fetched again every few seconds and swapped in place, except a part
// the user is busy with: one holding the focus in a field, or ticked
// rows. Forms outside those parts (the filters) are never touched.
"use strict";
(function () {
  const body = document.body;
  const every = Number(body.dataset.refresh || 0) * 1000;
  const status = document.getElementById("live-status");
  const toggle = document.getElementById("live");
  if (toggle) toggle.hidden = false;

  // busy reports whether the user is working in el: a field of it that
  // takes typing or a choice has the focus, or a checkbox of it is ticked.
  function busy(el) {
    const f = document.activeElement;
    if (f && el.contains(f) && f.matches("input:not([type=checkbox]):not([type=radio]), select, textarea")) return true;
    return el.querySelector("input[type=checkbox]:checked") !== null;
  }

  function say(text) {
    if (status) status.textContent = text;
  }

  async function refresh() {
    let res;
    try {
      res = await fetch(location.href, { headers: { "X-Sortie-Live": "1" }, credentials: "same-origin", cache: "no-store" });
    } catch (e) {
      say("Could not reach the dashboard; trying again");
      return;
    }
    if (!res.ok || res.redirected) {
      say("Live updates stopped: the page answered " + res.status + "; reload it");
      return "stop";
    }
    const doc = new DOMParser().parseFromString(await res.text(), "text/html");
    let held = 0;
    for (const el of document.querySelectorAll("[data-live][id]")) {
      const fresh = doc.getElementById(el.id);
      if (!fresh) continue;
      if (busy(el)) {
        held++;
        continue;
      }
      if (fresh.outerHTML !== el.outerHTML) el.replaceWith(document.importNode(fresh, true));
    }
    wireSelection();
    const at = new Date().toLocaleTimeString();
    say(held ? "Updated " + at + "; the list waits while rows are ticked" : "Updated " + at);
  }

  async function loop() {
    if (!document.hidden && (await refresh()) === "stop") return;
    setTimeout(loop, every);
  }
  if (every > 0) setTimeout(loop, every);

  // Row selection on the jobs page: the header's box ticks every row,
  // and the bar says how many are ticked and enables its buttons.
  function wireSelection() {
    const all = document.getElementById("select-all");
    const bulk = document.getElementById("bulk");
    if (!all || !bulk) return;
    all.hidden = false;
    const boxes = () => Array.from(document.querySelectorAll('input[type=checkbox][name=id][form="bulk"]'));
    const update = () => {
      const n = boxes().filter((b) => b.checked).length;
      const label = document.getElementById("selected");
      if (label) label.textContent = n ? n + (n === 1 ? " ticked row:" : " ticked rows:") : "Tick rows to act on them:";
      for (const b of bulk.querySelectorAll("button")) b.disabled = n === 0;
      all.checked = n > 0 && n === boxes().length;
      all.indeterminate = n > 0 && n < boxes().length;
    };
    all.onchange = () => {
      for (const b of boxes()) b.checked = all.checked;
      update();
    };
    for (const b of boxes()) b.onchange = update;
    update();
  }
  wireSelection();
})();
