// Front page, improved: the page works without this file (a GET form); with it, the feed URL, the
// preview and the autodiscovery links follow the form as it changes, the paste box fills the form in
// place, and the feed URL has a copy button. All markup comes from the server (/preview), already escaped.
"use strict";

(function () {
  const form = document.getElementById("feed-form");
  const result = document.getElementById("result");
  const paste = document.getElementById("paste-form");
  if (!form || !result) return;
  const FEED_FORMATS = ["atom", "rss", "json"];
  const MEDIA = { atom: "application/atom+xml", rss: "application/rss+xml", json: "application/feed+json" };
  let generation = 0;
  let timer = null;

  function query() {
    // The fields the chosen list does not take are hidden, and not sent: the server names a value given in one.
    const hidden = new Set();
    for (const field of form.querySelectorAll("[data-for-list][hidden] [name], [data-for-list][hidden][name]")) {
      hidden.add(field.name);
    }
    const params = new URLSearchParams();
    for (const [key, value] of new FormData(form)) {
      if (hidden.has(key)) continue;
      if (typeof value === "string" && value.trim() !== "") params.append(key, value.trim());
    }
    return params.toString();
  }

  function showFieldsForList() {
    const chosen = form.querySelector("input[name=list]:checked");
    for (const field of form.querySelectorAll("[data-for-list]")) {
      field.hidden = !chosen || !field.dataset.forList.split(" ").includes(chosen.value);
    }
  }

  // The autodiscovery links of the feed the preview shows, made from its "Open as" links and its title as shown
  // (the page holds each URL once per thing that uses it, not again for this).
  function updateDiscovery() {
    const body = document.getElementById("result-body");
    for (const link of document.head.querySelectorAll("link[data-feed-format]")) link.remove();
    if (!body) return;
    const hrefs = {};
    for (const a of body.querySelectorAll("a.format-link")) hrefs[a.dataset.format] = a.getAttribute("href");
    if (!hrefs.atom) return;
    const title = body.querySelector(".feed-title").textContent;
    const chosen = body.dataset.format;
    const order = FEED_FORMATS.filter((f) => f === chosen).concat(FEED_FORMATS.filter((f) => f !== chosen));
    const anchor = document.head.querySelector("link[rel=stylesheet]");
    for (const fmt of order) {
      const link = document.createElement("link");
      link.rel = "alternate";
      link.type = MEDIA[fmt];
      link.title = `${title} (${fmt})`;
      link.href = hrefs[fmt];
      link.dataset.feedFormat = fmt;
      document.head.insertBefore(link, anchor);
    }
  }

  async function refresh() {
    const mine = ++generation;
    const qs = query();
    result.setAttribute("aria-busy", "true");
    try {
      const response = await fetch(`/preview?${qs}`, { headers: { Accept: "text/html" } });
      const html = await response.text();
      if (mine !== generation) return; // a newer change is on its way
      result.innerHTML = html;
      setupCopy();
      updateDiscovery();
      history.replaceState(null, "", `/?${qs}`);
      const opml = document.getElementById("opml-link");
      const forum = form.elements.forum.value;
      if (opml) {
        opml.href = `/${forum}/opml`;
        opml.textContent = `All category feeds of ${forum} (OPML)`;
      }
    } catch (err) {
      if (mine === generation) result.querySelector(".status")?.replaceChildren("Could not update the preview.");
    } finally {
      if (mine === generation) result.removeAttribute("aria-busy");
    }
  }

  function schedule(delay) {
    clearTimeout(timer);
    timer = setTimeout(refresh, delay);
  }

  function setValue(name, value) {
    const control = form.elements[name];
    if (!control) return;
    if (control instanceof RadioNodeList) {
      for (const radio of control) radio.checked = radio.value === value;
    } else if (control instanceof HTMLSelectElement) {
      if (value && ![...control.options].some((o) => o.value === value)) control.add(new Option(value, value));
      control.value = value;
    } else {
      control.value = value;
    }
  }

  async function recognisePasted(event) {
    if (event) event.preventDefault();
    const status = document.getElementById("paste-status");
    const url = paste.elements.url.value.trim();
    if (!url) return;
    const response = await fetch(`/recognise?url=${encodeURIComponent(url)}&${query()}`);
    const answer = await response.json();
    status.textContent = answer.message;
    if (!answer.form) return;
    if (answer.form.forum !== form.elements.forum.value) {
      // Another forum has other categories: let the server render the form for it.
      location.assign(`/?url=${encodeURIComponent(url)}`);
      return;
    }
    for (const [name, value] of Object.entries(answer.form)) setValue(name, value);
    showFieldsForList();
    schedule(0);
  }

  function setupCopy() {
    const button = document.getElementById("copy-button");
    const input = document.getElementById("feed-url");
    const status = document.getElementById("copy-status");
    if (!button || !input) return;
    button.hidden = false;
    button.addEventListener("click", async () => {
      input.select();
      try {
        await navigator.clipboard.writeText(input.value);
      } catch (err) {
        document.execCommand("copy"); // older browsers, or no clipboard permission
      }
      status.textContent = "Copied. Paste it into your feed reader.";
    });
  }

  form.addEventListener("input", (event) => {
    if (event.target.name === "list") showFieldsForList();
    schedule(event.target.type === "text" || event.target.type === "search" ? 400 : 0);
  });
  form.addEventListener("change", (event) => {
    if (event.target.name === "forum") {
      form.submit(); // another forum: its categories come with a fresh page
      return;
    }
    schedule(0);
  });
  if (paste) {
    paste.addEventListener("submit", recognisePasted);
    paste.elements.url.addEventListener("paste", () => setTimeout(recognisePasted, 0));
  }
  showFieldsForList();
  setupCopy();
})();
