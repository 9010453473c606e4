// The console: pages over the HTTP API, in the browser, with the caller's own key.
//
// Everything the server returns was written by agents and is untrusted text: it reaches the page only
// through text nodes (el() below, textContent), never as markup. The page's Content-Security-Policy
// (routes/console.py) allows only this script and enforces Trusted Types, so an HTML sink such as
// innerHTML throws instead of parsing. The key lives in sessionStorage (this tab, until it closes) and
// travels only in the Authorization header of the console's own fetches, never in a URL.

const KEY = "recall.key";
const ID_RE = /^(thr|wkr|trg|rpt|mem)_[A-Za-z0-9_-]{1,64}$/;
const KINDS = ["thread", "worker", "trigger", "report", "memory"];
const PLURAL = { thread: "threads", worker: "workers", trigger: "triggers", report: "reports", memory: "memories" };
// A backlink's relation names the field of the linking object that holds the ID (docs/search.md), said here
// from the linked object's page: "trg_1 trigger, in this thread".
const RELATION = { cites: "cites it", neighbour: "has it as a neighbour", event: "an event in its log refers to it",
                   owner: "owned by it", thread: "in this thread", worker: "written by it", source: "learned from it" };
// The parts of an object's page a view's `links` can point at (`#/id/<id>?at=events`).
const SECTIONS = ["events", "backlinks", "payload", "body", "value", "reports"];
const PLURALS = new Set(Object.values(PLURAL));
const PAGE = 25;
// GET /search's modes ("": the server's default, hybrid when it has an embedder).
const MODES = [["", "default mode"], ["hybrid", "hybrid"], ["lexical", "lexical"], ["semantic", "semantic"], ["exact", "exact"]];

const main = document.getElementById("main");
let me = null; // the key's {id, tenant, scope, label} from GET /key

// ---- DOM: text only ------------------------------------------------------------------------------

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "data") for (const [k, v] of Object.entries(value)) node.dataset[k] = v;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name in node && typeof value !== "string") node[name] = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A page replaces the last; once signed out (a 401 mid-page), whatever that page was loading is dropped.
function show(...children) {
  if (me) main.replaceChildren(...children.flat(Infinity).filter((c) => c));
}

function idLink(id, gone = false) {
  return el("a", { class: gone ? "id gone" : "id", href: "#/id/" + encodeURIComponent(id), data: { id } }, id);
}

function runLink(run) {
  return el("a", { class: "id run", href: "#/run/" + encodeURIComponent(run) }, run);
}

function errorBox(err) {
  const text = err instanceof ApiError ? `${err.status} ${err.title}: ${err.detail}` : String(err);
  return el("p", { class: "error", role: "alert" }, text);
}

// A `**`-marked snippet (search) as text with <mark> elements around the marked words.
function marked(snippet) {
  const span = el("span", { class: "snippet" });
  snippet.split("**").forEach((part, i) => append(span, [i % 2 ? el("mark", {}, part) : part]));
  return span;
}

// ---- the API -------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, title, detail) {
    super(`${status} ${title}`);
    Object.assign(this, { status, title, detail });
  }
}

async function call(method, path, { body, headers = {}, raw = false, key = sessionStorage.getItem(KEY) } = {}) {
  if (!key) throw new ApiError(401, "Unauthorized", "Signed out."); // a page still loading when the key went
  const init = { method, headers: { ...headers, Authorization: "Bearer " + key }, credentials: "omit",
                 cache: "no-store", redirect: "error", referrerPolicy: "no-referrer" };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    let title = response.statusText, detail = "";
    try {
      const problem = await response.json();
      title = problem.title || title;
      detail = problem.detail || "";
    } catch { /* not a problem body */ }
    if (response.status === 401 && key === sessionStorage.getItem(KEY)) signOut(detail); // revoked meanwhile
    throw new ApiError(response.status, title, detail);
  }
  return raw ? response : response.json();
}

const get = (path, opts) => call("GET", path, opts);

function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    for (const v of [].concat(value)) if (v !== undefined && v !== null && v !== "") search.append(name, v);
  }
  const text = search.toString();
  return text ? "?" + text : "";
}

const canWrite = () => me && (me.scope === "write" || me.scope === "admin");
const isAdmin = () => me && me.scope === "admin";

// ---- a list read one page at a time, from its cursor -----------------------------------------------

// `load(cursor)` fetches one page ({data, next_cursor, has_more}); `row(item)` renders one item.
// The next page is fetched only when asked for ("More"), never ahead.
function pagedList(container, load, row, { empty = "None.", after } = {}) {
  const list = container;
  const more = el("button", { type: "button", class: "more", hidden: true }, "More");
  const status = el("p", { class: "note" });
  let cursor = null;
  async function next() {
    more.disabled = true;
    try {
      const page = await load(cursor);
      for (const item of page.data) list.append(row(item));
      if (after) await after(page.data);
      cursor = page.next_cursor;
      more.hidden = !page.has_more;
      status.textContent = list.childElementCount ? "" : (typeof empty === "function" ? empty() : empty);
    } catch (err) {
      status.replaceChildren(errorBox(err));
    } finally {
      more.disabled = false;
    }
  }
  more.addEventListener("click", next);
  const done = next();
  return { nodes: [list, status, more], done };
}

// ---- rendering a value ---------------------------------------------------------------------------

function isLink(v) {
  return v && typeof v === "object" && !Array.isArray(v) && typeof v.id === "string" && ID_RE.test(v.id);
}

function linkItem(link) {
  return el("span", { class: "link" }, idLink(link.id, link.deleted), link.deleted ? " (deleted or expired)" : "",
            link.summary ? el("span", { class: "summary" }, " ", link.summary) : "",
            link.refs && link.refs.length ? [" cites ", ...link.refs.flatMap((r, i) => [i ? ", " : "", idLink(r)])] : "");
}

function value(v) {
  if (v === null || v === undefined) return el("span", { class: "note" }, "none");
  if (typeof v === "string") return ID_RE.test(v) ? idLink(v) : el("span", {}, v);
  if (typeof v !== "object") return el("span", { class: "mono" }, String(v));
  if (isLink(v)) return linkItem(v);
  if (!Object.keys(v).length) return el("span", { class: "note" }, "none");
  if (Array.isArray(v)) {
    if (!v.length) return el("span", { class: "note" }, "none");
    return el("ul", { class: "plain" }, v.map((item) => el("li", {}, value(item))));
  }
  return fieldTable(v);
}

function fieldTable(object, skip = [], render = {}) {
  return el("table", { class: "fields" },
            Object.entries(object).filter(([name]) => !skip.includes(name))
              .map(([name, v]) => el("tr", { data: { field: name } }, el("th", {}, name),
                                     el("td", {}, (render[name] || value)(v)))));
}

// A view's `links` (name -> API path), each a link to the console's page for that path.
function linksTable(links) {
  return el("table", { class: "fields links" }, Object.entries(links).map(([name, path]) =>
    el("tr", { data: { link: name } }, el("th", {}, name),
       el("td", {}, el("a", { class: "mono", href: consoleHref(path) }, path)))));
}

// An API path as the console's page for it: an object's page, a part of that page, a memory's versions,
// or any other read (a worker's threads, a thread's checkpoints) shown as it comes.
function consoleHref(path) {
  const parts = path.split("?")[0].split("/").filter(Boolean);
  const [first, id, part] = parts;
  const object = (PLURALS.has(first) || first === "ids") && ID_RE.test(id || "");
  if (object && parts.length === 2) return "#/id/" + encodeURIComponent(id);
  if (object && parts.length === 3 && first === "memories" && part === "versions") return "#/versions/" + encodeURIComponent(id);
  if (object && parts.length === 3 && SECTIONS.includes(part)) return "#/id/" + encodeURIComponent(id) + query({ at: part });
  return "#/read" + query({ path });
}

function contentText(v) {
  return typeof v === "string" ? v : JSON.stringify(v, null, 2);
}

// ---- pages ---------------------------------------------------------------------------------------

function signInPage(message) {
  const input = el("input", { type: "password", id: "key", autocomplete: "off", class: "wide",
                              placeholder: "rk_...", "aria-label": "API key" });
  const out = el("div");
  if (message) out.append(el("p", { class: "error" }, message));
  const form = el("form", { id: "sign-in", method: "post", action: "#" },
                  input, el("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    try {
      me = await get("/key", { key });
      sessionStorage.setItem(KEY, key);
      input.value = "";
      signedIn();
      route();
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  });
  main.replaceChildren(el("h1", {}, "Sign in"),
                       el("p", { class: "note" }, "An API key (rk_<id>.<secret>). It is kept in this tab only, until " +
                          "the tab closes, and sent only to this server, in the Authorization header."),
                       el("p", { class: "note", id: "key-where" }, "Where a key is: ",
                          el("code", {}, "recall-server serve"), " saves one on its first start in ",
                          el("code", {}, "<data dir>/api-key"), " (", el("code", {}, "~/.local/share/recall-server/api-key"),
                          " on Linux, ", el("code", {}, "~/Library/Application Support/recall-server/api-key"),
                          " on macOS; each start prints the path), and ", el("code", {}, "recall-server keys create"),
                          " makes more."),
                       form, out);
  input.focus();
}

function homePage() {
  const id = el("input", { type: "text", id: "goto-id", class: "wide", placeholder: "thr_pr_412", "aria-label": "ID" });
  const goto = el("form", { id: "goto" }, id, el("button", { type: "submit" }, "Open"));
  goto.addEventListener("submit", (e) => { e.preventDefault(); location.hash = "#/id/" + encodeURIComponent(id.value.trim()); });

  const q = el("input", { type: "text", id: "search-q", class: "wide", placeholder: '"payment timeout"', "aria-label": "Search" });
  const boxes = KINDS.map((kind) => el("label", {}, el("input", { type: "checkbox", value: kind }), " ", kind));
  const mode = el("select", { id: "search-mode", "aria-label": "Mode" },
                  MODES.map(([value, label]) => el("option", { value }, label)));
  const search = el("form", { id: "search" }, q, mode, ...boxes, el("button", { type: "submit" }, "Search"));
  search.addEventListener("submit", (e) => {
    e.preventDefault();
    const types = boxes.map((b) => b.firstChild).filter((b) => b.checked).map((b) => b.value);
    location.hash = "#/search" + query({ q: q.value, mode: mode.value, type: types });
  });

  const run = el("input", { type: "text", id: "run-id", class: "wide", placeholder: "triage-42", "aria-label": "Run" });
  const runs = el("form", { id: "run" }, run, el("button", { type: "submit" }, "Show the run's reads"));
  runs.addEventListener("submit", (e) => { e.preventDefault(); location.hash = "#/run/" + encodeURIComponent(run.value.trim()); });

  const threads = pagedList(el("ul", { class: "plain", id: "threads" }),
                            (cursor) => get("/threads" + query({ limit: PAGE, cursor })),
                            (t) => el("li", {}, idLink(t.id), " ", el("span", { class: "mono" }, t.status), " ",
                                      el("span", { class: "summary" }, t.title, t.summary ? " — " + t.summary : "")));
  show(el("h1", {}, "Find"), el("h2", {}, "Open an ID"), goto, el("h2", {}, "Search"), search,
       el("h2", {}, "A run's recall"), runs, el("h2", {}, "Threads, most recently updated first"), threads.nodes);
}

async function searchPage(params) {
  const q = params.get("q") || "";
  const mode = params.get("mode") || "";
  const types = params.getAll("type");
  const ran = el("p", { class: "note", id: "search-ran" });
  const nearest = el("ol", { id: "nearest", hidden: true });
  const nearestTitle = el("h2", { hidden: true }, "Nearest, below the relevance floor");
  const hitRow = (hit) => el("li", { class: "hit" }, idLink(hit.id), " ", el("span", { class: "mono" }, hit.type), " ",
                             ranked ? el("span", { class: "score mono", title: "relevance, 0-1" }, hit.score.toFixed(2)) : "",
                             ranked ? " " : "", el("span", { class: "summary" }, hit.summary),
                             hit.snippet ? el("div", { class: "note" }, marked(hit.snippet)) : "");
  let ranked = false;
  let emptyText = "No live object matches.";
  const list = pagedList(el("ol", { id: "hits" }),
                         async (cursor) => {
                           const page = await get("/search" + query({ q, mode, type: types, limit: PAGE, cursor }));
                           ranked = page.mode !== "exact";
                           ran.textContent = (page.mode ? page.mode + " search" : "") + (page.note ? ": " + page.note : "");
                           if (page.nearest && page.nearest.length) {
                             nearest.replaceChildren(...page.nearest.map(hitRow));
                             nearest.hidden = nearestTitle.hidden = false;
                           }
                           if (page.nearest) emptyText = "No close match.";
                           return page;
                         },
                         hitRow, { empty: () => emptyText });
  show(el("h1", {}, "Search: ", el("span", { class: "mono" }, q)),
       types.length ? el("p", { class: "note" }, "Only: " + types.join(", ")) : "", ran, list.nodes,
       nearestTitle, nearest);
}

// `at`: the part of the page to scroll to once the lists above it have their first page (a `links` row).
async function objectPage(id, at) {
  show(el("p", { class: "note" }, "Loading " + id + " ..."));
  let view, resolved;
  try {
    resolved = await get("/ids/" + encodeURIComponent(id));
    view = await get(resolved.href);
  } catch (err) {
    // A missing ID has no reads either (the same 404, said once); a gone one keeps the runs that read it.
    show(el("h1", {}, el("span", { class: "mono" }, id)), errorBox(err), err.status === 410 ? readsSection(id).nodes : "");
    return;
  }
  const kind = resolved.type;
  const summary = el("p", { class: "summary", id: "object-summary" });
  const inline = el("div", { id: "inline-view" });
  const render = (v) => {
    summary.textContent = v.summary || v.title || "";
    inline.replaceChildren(fieldTable(v, ["events", "spilled", "payload", "body", "value"], { links: linksTable }));
  };
  render(view);
  const sections = [
    el("h1", {}, el("span", { class: "mono", id: "object-id" }, id), " ", el("span", { class: "note" }, kind)), summary,
  ];
  if (kind === "memory") {
    sections.push(el("p", {}, el("a", { href: "#/versions/" + encodeURIComponent(id), id: "versions-link" },
                                  "Versions side by side")));
  }
  sections.push(el("h2", {}, "Inline view"), inline);
  for (const name of ["payload", "body", "value"]) {
    if (name in view) sections.push(el("h2", { data: { at: name } }, name), el("pre", { class: "content", data: { content: name } }, contentText(view[name])));
  }
  for (const [name, spill] of Object.entries(view.spilled || {})) sections.push(...spilledSection(kind, name, spill));
  const lists = [];
  // A note changes the thread's view too (events_total, updated_at): read it again.
  if (kind === "thread") lists.push(eventsSection(id, async () => render(await get(resolved.href))));
  if (kind === "worker" && view.reports_total > view.reports.length) lists.push(reportsSection(id));
  lists.push(backlinksSection(id), readsSection(id));
  show(sections, lists.map((l) => l.nodes));
  if (!at) return;
  await Promise.all(lists.map((l) => l.done));
  if (!summary.isConnected) return; // another page replaced this one meanwhile
  const target = main.querySelector(`[data-at="${CSS.escape(at)}"]`) || main.querySelector(`tr[data-field="${CSS.escape(at)}"]`);
  if (target) target.scrollIntoView();
}

// `changed`: called after a note is added, to show what it changed elsewhere on the page.
function eventsSection(threadId, changed) {
  const path = "/threads/" + encodeURIComponent(threadId) + "/events";
  const make = () => pagedList(el("ol", { class: "events", id: "events" }),
                               (cursor) => get(path + query({ limit: PAGE, cursor })),
                               (e) => el("li", { value: e.seq, class: "event" }, el("span", { class: "mono" }, e.at, " ", e.type), " ",
                                         el("span", { class: "summary" }, e.summary), e.ref ? [" ", idLink(e.ref, e.ref_deleted)] : ""),
                               { empty: "No events." });
  const first = make();
  const holder = el("div", {}, first.nodes);
  const nodes = [el("h2", { data: { at: "events" } }, "Event log"), holder];
  if (canWrite()) {
    const summary = el("input", { type: "text", class: "wide", id: "note-summary", placeholder: "one line", "aria-label": "Note" });
    const ref = el("input", { type: "text", id: "note-ref", placeholder: "an ID (optional)", "aria-label": "Reference" });
    const out = el("div");
    const form = el("form", { id: "add-note", class: "write" }, summary, ref, el("button", { type: "submit" }, "Add a note"));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      try {
        await call("POST", path, { body: ref.value.trim() ? { summary: summary.value, ref: ref.value.trim() } : { summary: summary.value } });
        summary.value = ref.value = "";
        out.replaceChildren();
        holder.replaceChildren(...make().nodes);
        await changed();
      } catch (err) {
        out.replaceChildren(errorBox(err));
      }
    });
    nodes.push(form, out);
  }
  return { nodes, done: first.done };
}

function reportsSection(workerId) {
  const list = pagedList(el("ul", { class: "plain", id: "reports" }),
                         (cursor) => get("/workers/" + encodeURIComponent(workerId) + "/reports" + query({ limit: PAGE, cursor })),
                         (r) => el("li", {}, idLink(r.id), " ", el("span", { class: "summary" }, r.summary)));
  return { nodes: [el("h2", { data: { at: "reports" } }, "Every report"), list.nodes], done: list.done };
}

function backlinksSection(id) {
  const list = pagedList(el("ul", { class: "plain", id: "backlinks" }),
                         (cursor) => get("/ids/" + encodeURIComponent(id) + "/backlinks" + query({ limit: PAGE, cursor })),
                         (b) => el("li", { data: { relation: b.relation } }, idLink(b.id), " ",
                                   el("span", { class: "mono" }, b.type), ", ",
                                   el("span", { class: "relation", title: "relation: " + b.relation },
                                      Object.hasOwn(RELATION, b.relation) ? RELATION[b.relation] : b.relation), " ",
                                   el("span", { class: "summary" }, b.summary)),
                         { empty: "Nothing links here." });
  return { nodes: [el("h2", { data: { at: "backlinks" } }, "Backlinks"), list.nodes], done: list.done };
}

function readsSection(id) {
  const list = pagedList(el("ul", { class: "plain", id: "object-reads" }),
                         (cursor) => get("/ids/" + encodeURIComponent(id) + "/reads" + query({ limit: PAGE, cursor })),
                         (r) => el("li", {}, el("span", { class: "mono" }, r.at), " ", runLink(r.run), " ",
                                   el("span", { class: "mono" }, `${r.route} ${r.status} ${r.bytes} B`)),
                         { empty: "No traced run has read it." });
  return { nodes: el("section", {}, el("h2", {}, "Runs that read it"), list.nodes), done: list.done };
}

// Spilled content: its preview, grep (payloads and bodies), and byte ranges, all shown as text.
function spilledSection(kind, name, spill) {
  const out = el("pre", { class: "content", id: "content-" + name }, spill.preview);
  const where = el("p", { class: "note", id: "content-where-" + name }, "Preview.");
  const nodes = [el("h2", { data: { at: name } }, name + " (spilled)"),
                 el("p", { class: "note" }, `${spill.bytes} bytes, ${spill.content_type}. ${spill.hint}`)];
  async function readRange(range) {
    try {
      const response = await call("GET", spill.href, { headers: { Range: range }, raw: true });
      const bytes = new Uint8Array(await response.arrayBuffer());
      out.textContent = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
      where.textContent = (response.headers.get("Content-Range") || `bytes 0-${bytes.length - 1}/${bytes.length}`);
    } catch (err) {
      out.replaceChildren();
      where.replaceChildren(errorBox(err));
    }
  }
  if ((kind === "trigger" && name === "payload") || (kind === "report" && name === "body")) {
    const pattern = el("input", { type: "text", id: "grep-pattern", placeholder: "payment timeout", "aria-label": "Pattern" });
    const regex = el("input", { type: "checkbox", id: "grep-regex" });
    const context = el("input", { type: "number", id: "grep-context", min: "0", max: "10", value: "1", "aria-label": "Context lines" });
    const matches = el("ol", { id: "grep-matches" });
    const form = el("form", { id: "grep" }, pattern, el("label", {}, regex, " RE2"), "context", context,
                    el("button", { type: "submit" }, "Grep"));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      try {
        const result = await get(spill.href + "/grep" + query({ pattern: pattern.value, regex: regex.checked ? "true" : "",
                                                                context: context.value }));
        matches.replaceChildren(...result.matches.map((m) => el("li", { class: "match" },
          el("span", { class: "mono" }, `line ${m.line}, byte ${m.offset} `),
          el("button", { type: "button", class: "read-range", onclick: () => readRange(m.range) }, "Read " + m.range),
          el("pre", {}, m.lines.map((l) => `${l.number}: ${l.text}`).join("\n")))));
        if (!result.matches.length) matches.append(el("li", { class: "note" }, "No match in " + result.scanned + " bytes."));
        if (result.truncated) matches.append(el("li", { class: "note" }, "More matches exist than shown."));
      } catch (err) {
        matches.replaceChildren(errorBox(err));
      }
    });
    nodes.push(form, matches);
  }
  const first = el("input", { type: "number", id: "range-first-" + name, min: "0", value: "0", "aria-label": "First byte" });
  const last = el("input", { type: "number", id: "range-last-" + name, min: "0", value: String(Math.min(spill.bytes, 4096) - 1),
                             "aria-label": "Last byte" });
  const ranges = el("form", { class: "range", id: "range-" + name }, "bytes", first, "to", last, el("button", { type: "submit" }, "Read"));
  ranges.addEventListener("submit", (e) => { e.preventDefault(); readRange(`bytes=${first.value}-${last.value}`); });
  nodes.push(ranges, where, out);
  return nodes;
}

// A run's reads as a timeline, each hop with what its object is now.
async function runPage(run) {
  const states = new Map();
  const list = el("ol", { class: "timeline", id: "timeline" });
  const paged = pagedList(list, (cursor) => get("/runs/" + encodeURIComponent(run) + "/reads" + query({ limit: PAGE, cursor })),
    (r) => el("li", { class: "hop", data: { object: r.object_id || "" } },
              el("span", { class: "mono" }, r.at), " ", r.object_id && ID_RE.test(r.object_id) ? idLink(r.object_id) : el("span", { class: "mono" }, r.object_id || "(a list)"),
              " ", el("span", { class: "mono" }, `${r.route} → ${r.status}, ${r.bytes} B`),
              el("span", { class: "state" }, "")),
    { empty: "No reads settled for this run (reads appear about two trace flush intervals after they are made).",
      after: async () => {
        const fresh = [...new Set([...list.querySelectorAll("li.hop")].map((li) => li.dataset.object))]
          .filter((id) => ID_RE.test(id) && !states.has(id));
        await Promise.all(fresh.map(async (id) => states.set(id, await stateNow(id))));
        for (const li of list.querySelectorAll("li.hop")) {
          const state = states.get(li.dataset.object);
          if (state) {
            const badge = li.querySelector(".state");
            badge.textContent = state;
            badge.className = "state " + state.split(" ")[0];
          }
        }
      } });
  show(el("h1", {}, "Run ", el("span", { class: "mono" }, run)),
       el("p", { class: "note" }, "Its reads in the order they were made; each ID with its state now."), paged.nodes);
}

async function stateNow(id) {
  try {
    if (id.startsWith("mem_")) return (await get("/memories/" + encodeURIComponent(id))).status; // current | superseded
    await get("/ids/" + encodeURIComponent(id));
    return "live";
  } catch (err) {
    if (err.status === 410) return "gone (deleted or expired)";
    if (err.status === 404) return "missing";
    return "unknown";
  }
}

// A memory's versions, newest first, side by side.
async function versionsPage(id) {
  const row = el("div", { class: "versions", id: "versions" });
  const paged = pagedList(row, (cursor) => get("/memories/" + encodeURIComponent(id) + "/versions" + query({ limit: 10, cursor })),
    (v) => el("div", { class: "version " + v.status, data: { id: v.id } },
              el("h2", {}, "v" + v.version, " ", el("span", { class: "mono status" }, v.status)), idLink(v.id),
              el("p", { class: "summary" }, v.summary), el("div", { class: "detail" }, el("p", { class: "note" }, "..."))),
    { after: async (versions) => {
        await Promise.all(versions.map(async (v) => {
          const box = row.querySelector(`[data-id="${CSS.escape(v.id)}"] .detail`);
          try {
            const m = await get(v.href);
            const shown = { created_at: m.created_at, confirmed: m.confirmed, expires_at: m.expires_at ?? null,
                            supersedes: m.supersedes ?? null, superseded_by: m.superseded_by ?? null,
                            sources: m.sources, tags: m.tags, kind: m.kind };
            box.replaceChildren(fieldTable(shown),
                                "value" in m ? el("pre", { class: "content" }, contentText(m.value))
                                  : el("pre", { class: "content" }, m.spilled.value.preview));
          } catch (err) {
            box.replaceChildren(errorBox(err));
          }
        }));
      } });
  show(el("h1", {}, "Versions of ", idLink(id)),
       el("p", { class: "note" }, "Newest first; each with what it supersedes, its sources, confirmed state and expiry."),
       paged.nodes);
}

// Any other read a view links to (a worker's threads, a thread's checkpoints), as it comes: a list a page
// at a time, anything else as a table; every ID in it a link. Only this server's own paths.
async function readPage(path) {
  const title = el("h1", {}, "GET ", el("span", { class: "mono", id: "read-path" }, path));
  const url = new URL(path, location.origin);
  if (!path.startsWith("/") || url.origin !== location.origin) {
    show(title, el("p", { class: "error", role: "alert" }, "Not a path of this server's API."));
    return;
  }
  const first = await get(url.pathname + url.search);
  if (!(first && Array.isArray(first.data) && "has_more" in first)) {
    show(title, el("div", { id: "read" }, value(first)));
    return;
  }
  const list = pagedList(el("ul", { class: "plain", id: "read" }),
                         (cursor) => {
                           if (!cursor) return first;
                           url.searchParams.set("cursor", cursor);
                           return get(url.pathname + url.search);
                         },
                         (item) => el("li", { class: "item" }, value(item)));
  show(title, list.nodes);
}

// Keys and hooks of the tenant (admin keys only; the server refuses any other).
async function adminPage() {
  if (!isAdmin()) {
    show(el("h1", {}, "Keys and hooks"), el("p", { class: "error" }, "This needs an admin key."));
    return;
  }
  const keys = el("tbody", { id: "keys" });
  const hooks = el("tbody", { id: "hooks" });
  const secret = el("div", { id: "secret" });

  function revokeButton(path, label, own) {
    const button = el("button", { type: "button", class: "revoke", disabled: own }, own ? "(this key)" : "Revoke");
    button.addEventListener("click", async () => {
      if (button.dataset.armed !== "1") {
        button.dataset.armed = "1";
        button.textContent = "Confirm: revoke " + label;
        return;
      }
      try {
        await call("DELETE", path);
        await load();
      } catch (err) {
        secret.replaceChildren(errorBox(err));
      }
    });
    return button;
  }

  async function load() {
    const [keyList, hookList] = await Promise.all([get("/admin/keys"), get("/admin/hooks")]);
    keys.replaceChildren(...keyList.data.map((k) => el("tr", { data: { key: k.id } },
      el("td", { class: "mono" }, k.id), el("td", {}, k.scope), el("td", {}, k.label), el("td", { class: "mono" }, k.created_at),
      el("td", { class: "mono" }, k.revoked_at || ""),
      el("td", {}, k.revoked_at ? "" : revokeButton("/admin/keys/" + encodeURIComponent(k.id), k.id, k.id === me.id)))));
    hooks.replaceChildren(...hookList.data.map((h) => el("tr", { data: { hook: h.id } },
      el("td", { class: "mono" }, h.id), el("td", {}, h.source), el("td", {}, h.label), el("td", { class: "mono" }, h.url),
      el("td", { class: "mono" }, h.created_at), el("td", { class: "mono" }, h.revoked_at || ""),
      el("td", {}, h.revoked_at ? "" : revokeButton("/admin/hooks/" + encodeURIComponent(h.id), h.id, false)))));
  }

  const scope = el("select", { id: "new-key-scope", "aria-label": "Scope" }, ["read", "write", "admin"].map((s) => el("option", { value: s }, s)));
  const keyLabel = el("input", { type: "text", id: "new-key-label", placeholder: "label", "aria-label": "Key label" });
  const keyForm = el("form", { id: "create-key" }, scope, keyLabel, el("button", { type: "submit" }, "Create key"));
  keyForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const made = await call("POST", "/admin/keys", { body: { scope: scope.value, label: keyLabel.value } });
      secret.replaceChildren(el("p", { class: "secret" }, "New " + made.scope + " key (shown once, copy it now): ",
                                el("code", { id: "new-secret" }, made.key)));
      keyLabel.value = "";
      await load();
    } catch (err) {
      secret.replaceChildren(errorBox(err));
    }
  });
  const hookLabel = el("input", { type: "text", id: "new-hook-label", placeholder: "label", "aria-label": "Hook label" });
  const hookForm = el("form", { id: "create-hook" }, "GitHub", hookLabel, el("button", { type: "submit" }, "Create hook"));
  hookForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const made = await call("POST", "/admin/hooks", { body: { source: "github", label: hookLabel.value } });
      secret.replaceChildren(el("p", { class: "secret" }, "New hook: deliveries to ", el("code", {}, made.url),
                                ", signing secret (shown once): ", el("code", { id: "new-secret" }, made.secret)));
      hookLabel.value = "";
      await load();
    } catch (err) {
      secret.replaceChildren(errorBox(err));
    }
  });
  const head = (...names) => el("thead", {}, el("tr", {}, names.map((n) => el("th", {}, n))));
  show(el("h1", {}, "Keys and hooks of tenant ", el("span", { class: "mono" }, me.tenant)), secret,
       el("h2", {}, "API keys"), keyForm,
       el("div", { class: "scroll" }, el("table", {}, head("ID", "scope", "label", "created", "revoked", ""), keys)),
       el("h2", {}, "Webhooks"), hookForm,
       el("div", { class: "scroll" }, el("table", {}, head("ID", "source", "label", "URL", "created", "revoked", ""), hooks)));
  try {
    await load();
  } catch (err) {
    secret.replaceChildren(errorBox(err));
  }
}

// ---- routing, on the URL fragment (never sent to the server) -------------------------------------

async function route() {
  if (!sessionStorage.getItem(KEY) || !me) return signInPage();
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, search = ""] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (!parts.length) homePage();
    else if (parts[0] === "id" && parts[1]) await objectPage(parts[1], new URLSearchParams(search).get("at"));
    else if (parts[0] === "search") await searchPage(new URLSearchParams(search));
    else if (parts[0] === "run" && parts[1]) await runPage(parts[1]);
    else if (parts[0] === "versions" && parts[1]) await versionsPage(parts[1]);
    else if (parts[0] === "read") await readPage(new URLSearchParams(search).get("path") || "");
    else if (parts[0] === "admin") await adminPage();
    else show(el("h1", {}, "No such page"), el("p", {}, el("a", { href: "#/" }, "Find")));
  } catch (err) {
    show(errorBox(err));
  }
}

function signedIn() {
  document.getElementById("nav").hidden = false;
  document.getElementById("nav-admin").hidden = !isAdmin();
  document.getElementById("whoami").textContent = `${me.tenant} · ${me.scope} key ${me.id}${me.label ? " (" + me.label + ")" : ""}`;
  document.body.dataset.scope = me.scope;
}

function signOut(message) {
  sessionStorage.removeItem(KEY);
  me = null;
  document.getElementById("nav").hidden = true;
  delete document.body.dataset.scope;
  signInPage(message);
}

document.getElementById("sign-out").addEventListener("click", () => signOut());
window.addEventListener("hashchange", route);

(async () => {
  if (sessionStorage.getItem(KEY)) {
    try {
      me = await get("/key");
      signedIn();
    } catch {
      sessionStorage.removeItem(KEY);
    }
  }
  await route();
  document.body.dataset.ready = "1";
})();
