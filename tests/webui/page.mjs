// The chat page of `tessera serve` in Debian's headless Chromium, driven
// through puppeteer-core (nothing downloaded: the browser is /usr/bin/chromium).
// Run by tests/scripts/webui.sh against a server it started with
// --api-key and --conversations-db.
//
//   node tests/webui/page.mjs URL KEY SHOT_DIR
//
// Checks: every asset's content type and cache headers; no console error;
// a message sent with Enter and its reply streamed chunk by chunk (the DOM
// grows many times before the end); a reply stopped with Esc (marked
// stopped; the server is idle after); Regenerate; Edit and resend; a reload
// finds the conversation, served from SQLite, with the edit; screenshots
// at desktop and phone sizes.
import puppeteer from "puppeteer-core";
import assert from "node:assert/strict";
import path from "node:path";

const [url, key, shots] = process.argv.slice(2);
const failures = [];
const check = (ok, what) => { if (!ok) failures.push(what); console.log(`${ok ? "ok" : "FAIL"}: ${what}`); };

// The page is behind the key too: a browser is asked for it (HTTP Basic,
// the key as password).
const basic = { Authorization: "Basic " + Buffer.from(`me:${key}`).toString("base64") };
const anon = await fetch(url + "/");
check(anon.status === 401 && (anon.headers.get("www-authenticate") ?? "").startsWith("Basic"),
      "the page asks for the key (401, a Basic challenge)");

// Assets: content types and cache headers, straight over HTTP.
for (const [p, type] of [["/", "text/html"], ["/webui/app.js", "text/javascript"], ["/webui/markdown.js", "text/javascript"],
                         ["/webui/style.css", "text/css"], ["/webui/icon.svg", "image/svg+xml"]]) {
  const r = await fetch(url + p, { headers: basic });
  check(r.status === 200 && (r.headers.get("content-type") ?? "").startsWith(type) &&
        r.headers.get("cache-control") === "no-cache" && !!r.headers.get("etag") &&
        r.headers.get("x-content-type-options") === "nosniff", `${p}: 200, ${type}, no-cache, ETag, nosniff`);
  const again = await fetch(url + p, { headers: { ...basic, "If-None-Match": r.headers.get("etag") } });
  check(again.status === 304, `${p}: 304 for its ETag`);
}
check((await fetch(url + "/webui/../CMakeLists.txt", { headers: basic })).status === 404, "no file outside the page is served");
check((await fetch(url + "/v1/conversations")).status === 401, "conversations need the API key");

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 800 });
  const consoleErrors = [];
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  page.on("dialog", (d) => d.accept(d.type() === "prompt" ? "Tell me about a red ball." : undefined));
  // The user answers the browser's prompt for the key; the page's own calls
  // to /v1 then carry the same credentials.
  await page.authenticate({ username: "me", password: key });
  // Long greedy replies (the page's own fields, and ignore_eos so that a
  // reply lasts long enough to be watched and stopped).
  await page.setRequestInterception(true);
  page.on("request", (req) => {
    if (req.url().endsWith("/v1/chat/completions") && req.method() === "POST") {
      const body = JSON.parse(req.postData());
      if (!body.response_format) body.ignore_eos = true;
      req.continue({ postData: JSON.stringify(body) });
    } else {
      req.continue();
    }
  });
  await page.goto(url + "/", { waitUntil: "networkidle0" });
  // stories260K writes 1500 tokens in a quarter of a second: too fast for a
  // busy machine's browser to see the reply streaming (the selector below
  // missed it about one run in five) or to stop it mid-way. Read the
  // stream at 64 KB/s (~4 s a reply), as over a slow link.
  await page.emulateNetworkConditions({ download: 64 * 1024, upload: 1 << 20, latency: 0 });
  await page.$eval("#temperature", (e) => { e.value = "0"; });
  await page.$eval("#max-tokens", (e) => { e.value = "1500"; });

  // Watch the reply grow: every change of the last reply's text.
  await page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver(() => {
      const b = document.querySelector("#messages li.assistant.streaming .body");
      if (b) window.__lengths.push(b.textContent.length);
    }).observe(document.getElementById("messages"), { subtree: true, childList: true, characterData: true });
  });
  const idle = () => page.waitForFunction(() => !document.querySelector("#messages li.streaming"), { timeout: 60000 });
  await page.type("#input", "Tell me a story.");
  await page.keyboard.press("Enter");
  await page.waitForSelector("#messages li.assistant.streaming");
  await idle();
  const lengths = (await page.evaluate(() => window.__lengths)).filter((n) => n > 0);
  const growing = lengths.filter((n, i) => i === 0 || n > lengths[i - 1]).length;
  const final = await page.$eval("#messages li.assistant:last-child .body", (b) => b.textContent.length);
  // Streamed: the text appeared in several steps, the first a small part of
  // the whole (how many steps depends on how fast the browser reads).
  check(growing >= 3 && lengths[0] < final / 4,
        `the reply streamed: its text grew ${growing} times, first ${lengths[0]} of ${final} characters`);
  const first = await page.$eval("#messages li.assistant:last-child .stats", (e) => e.textContent);
  check(/first token \d+ ms/.test(first) && /tokens\/s/.test(first), `per-reply TTFT and tokens/s shown ("${first}")`);

  // Stop: a second message, Esc as soon as the reply starts.
  await page.evaluate(() => { window.__lengths = []; });
  await page.type("#input", "And then?");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => window.__lengths.length > 2, { timeout: 30000 });
  await page.keyboard.press("Escape");
  await idle();
  const stopped = await page.$eval("#messages li.assistant:last-child .stats", (e) => e.textContent);
  check(/stopped/.test(stopped), `Esc stopped the reply ("${stopped}")`);
  const metrics = await (await fetch(url + "/metrics", { headers: basic })).text();
  await new Promise((r) => setTimeout(r, 300));
  const running = Number((await (await fetch(url + "/metrics")).text()).match(/^tessera_num_requests_running (\S+)$/m)[1]);
  check(running === 0 && metrics.length > 0, "the server stopped generating it");

  // Regenerate the stopped reply: whole this time.
  const before = await page.$$eval("#messages li", (l) => l.length);
  await page.click("#messages li.assistant:last-child .tools button:nth-child(2)");  // Copy, Regenerate
  await page.waitForSelector("#messages li.assistant.streaming");
  await idle();
  const regen = await page.$eval("#messages li.assistant:last-child .stats", (e) => e.textContent);
  check(!/stopped/.test(regen) && (await page.$$eval("#messages li", (l) => l.length)) === before,
        `Regenerate replaced the reply ("${regen}")`);

  // Edit the first message and resend: the conversation restarts from it.
  await page.click("#messages li.user:first-child .tools button:nth-child(2)");  // Copy, Edit
  await page.waitForSelector("#messages li.assistant.streaming");
  await idle();
  const texts = await page.$$eval("#messages li", (l) => l.map((x) => x.querySelector(".body").textContent));
  check(texts.length === 2 && texts[0] === "Tell me about a red ball.", "Edit and resend replaced the conversation");
  await page.screenshot({ path: path.join(shots, "webui-desktop.png") });

  // Reload: the conversation comes back from the server.
  await page.reload({ waitUntil: "networkidle0" });
  await page.waitForSelector("#conversations li .open");
  const titles = await page.$$eval("#conversations li .open", (l) => l.map((x) => x.textContent));
  check(titles.length === 1 && titles[0].startsWith("Tell me a story."), `the conversation is listed after a reload (${titles})`);
  await page.click("#conversations li .open");
  await page.waitForFunction(() => document.querySelectorAll("#messages li").length === 2);
  const reloaded = await page.$$eval("#messages li", (l) => l.map((x) => x.querySelector(".body").textContent));
  check(reloaded[0] === "Tell me about a red ball." && reloaded[1] === texts[1], "its messages are the edited ones");

  // Keyboard only: Tab reaches the composer's Send.
  // Phone size.
  await page.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  await page.reload({ waitUntil: "networkidle0" });
  await page.waitForSelector("#conversations li .open", { visible: false });
  const sidebarHidden = await page.$eval("#sidebar", (e) => getComputedStyle(e).display === "none");
  const fits = await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
  check(sidebarHidden && fits, "phone size: the list folds away and nothing is wider than the screen");
  await page.click("#toggle-sidebar");
  await page.click("#conversations li .open");
  await page.waitForFunction(() => document.querySelectorAll("#messages li").length === 2);
  await page.screenshot({ path: path.join(shots, "webui-phone.png") });

  // A soft prompt and a structured (JSON) reply, in a new chat.
  await page.setViewport({ width: 1280, height: 800 });
  await page.reload({ waitUntil: "networkidle0" });
  await page.click("#new-chat");
  await page.click("#toggle-settings");
  const softPrompts = await page.$$eval("#soft-prompt option", (l) => l.map((o) => o.value));
  check(softPrompts.includes("story"), `the server's soft prompts are offered (${softPrompts})`);
  await page.select("#soft-prompt", "story");
  await page.select("#format", "json");
  await page.$eval("#max-tokens", (e) => { e.value = "120"; });
  await page.$eval("#temperature", (e) => { e.value = "0"; });
  await page.type("#input", "Describe a cat as JSON.");
  await page.keyboard.press("Enter");
  // (A short reply may come and go between two looks for the streaming one.)
  await page.waitForFunction(() => document.querySelectorAll("#messages li.assistant").length === 1 &&
                                   !document.querySelector("#messages li.streaming"), { timeout: 60000 });
  const shown = await page.$eval("#messages li.assistant:last-child .body", (b) => ({
    label: b.querySelector(".label")?.textContent, json: b.querySelector("pre.json")?.textContent }));
  check(shown.label === "JSON (structured output)" && typeof shown.json === "string" && shown.json.trimStart().startsWith("{"),
        `a structured reply is shown as JSON (${JSON.stringify(shown).slice(0, 120)})`);
  check(consoleErrors.length === 0, `no console errors (${consoleErrors.join(" | ")})`);
} finally {
  await browser.close();
}
if (failures.length) {
  console.log(`webui: ${failures.length} failure(s)`);
  process.exit(1);
}
console.log("webui: all passed");
