// dsmlkit inspector: calls this server's /v1/parse and render routes and shows the answer.
// Plain DOM code, no framework and nothing loaded from elsewhere. Model and prompt text is
// only ever put on the page as text nodes (never parsed as HTML).
"use strict";

const $ = (id) => document.getElementById(id);

const RENDER_ROUTES = {
  chat: "/v1/chat/completions/render",
  messages: "/v1/messages/render",
  responses: "/v1/responses/render",
};

function requestHeaders() {
  const headers = { "content-type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) {
    headers.authorization = "Bearer " + key;
  }
  return headers;
}

// POST a JSON text; resolves to the decoded answer or throws an Error with the server's
// own message (OpenAI and Anthropic error shapes alike).
async function post(path, bodyText) {
  const response = await fetch(path, { method: "POST", headers: requestHeaders(), body: bodyText });
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (data && data.error) || {};
    const where = error.param ? " (" + error.param + ")" : "";
    throw new Error(response.status + ": " + (error.message || response.statusText) + where);
  }
  return data;
}

function showError(element, error) {
  element.textContent = error ? String(error.message || error) : "";
  element.hidden = !error;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

// Lays `text` out in `target` with the [start, end, className, call] spans coloured; the
// spans are sorted and do not overlap; text between spans is left plain.
function paintSpans(target, text, spans) {
  target.replaceChildren();
  let at = 0;
  for (const [start, end, className, call] of spans) {
    if (start > at) {
      target.append(text.slice(at, start));
    }
    const span = element("span", className, text.slice(start, end));
    if (call !== undefined) {
      span.dataset.call = String(call);
      span.title = "call " + (call + 1);
    }
    target.append(span);
    at = end;
  }
  if (at < text.length) {
    target.append(text.slice(at));
  }
}

// Where each piece of the parse came from. Content and reasoning deltas are source text as
// written, and so are string argument values; they are found in event order, each after the
// previous one and never inside a tag (a value after its own parameter opener). Whatever
// lies between them is markup (the block, invoke and parameter tags, the separators),
// attributed to the call it belongs to while one is open.
function sourceSpans(source, stream) {
  const spans = [];
  let cursor = 0;
  let openCall;
  let callNumber = -1;
  const insideTag = (at) => {
    const open = source.lastIndexOf("<", at - 1);
    return open >= cursor && open > source.lastIndexOf(">", at - 1) &&
      /^<\/?(\||｜|think)/.test(source.slice(open, open + 7));
  };
  const markupTo = (end, call) => {
    if (end > cursor) {
      spans.push([cursor, end, "markup", call]);
      cursor = end;
    }
  };
  const place = (piece, className, call) => {
    if (!piece) {
      return false;
    }
    let found = source.indexOf(piece, cursor);
    while (found >= 0 && insideTag(found)) {
      found = source.indexOf(piece, found + 1);
    }
    if (found < 0) {
      return false;
    }
    markupTo(found, call);
    spans.push([found, found + piece.length, className, call]);
    cursor = found + piece.length;
    return true;
  };
  for (const step of stream) {
    for (const event of step.events) {
      if (event.type === "content" || event.type === "reasoning") {
        place(event.text, event.type);
      } else if (event.type === "tool_call_start") {
        callNumber += 1;
        openCall = callNumber;
      } else if (event.type === "tool_call_end") {
        const entries = Object.entries(event.arguments);
        let placed = false;
        for (const [name, value] of entries) {
          const opener = source.indexOf('name="' + name + '"', cursor);
          const openerEnd = opener < 0 ? -1 : source.indexOf(">", opener);
          if (openerEnd >= 0) {
            markupTo(openerEnd + 1, openCall);
          }
          const text = typeof value === "string" ? value : JSON.stringify(value);
          placed = place(text, "value", openCall) || placed;
        }
        if (!placed && entries.length) {
          place(event.arguments_json, "value", openCall);
        }
        const closer = source.indexOf("invoke>", cursor);
        if (closer >= 0) {
          markupTo(closer + "invoke>".length, openCall);
        }
        openCall = undefined;
      }
    }
  }
  markupTo(source.length);
  return spans;
}

let lastStream = [];

function fillEvents(stream) {
  const body = $("events").tBodies[0];
  body.replaceChildren();
  let count = 0;
  stream.forEach((step, index) => {
    const fed = step.delta === null ? "close()" : JSON.stringify(step.delta);
    const rows = step.events.length ? step.events : [null];
    rows.forEach((event, position) => {
      const row = element("tr");
      row.dataset.delta = String(index);
      row.append(element("td", "", position ? "" : String(index)));
      row.append(element("td", "fed", position ? "" : fed));
      if (event === null) {
        row.append(element("td", "", "(held back)"), element("td", "fields", ""));
      } else {
        count += 1;
        const { type, ...fields } = event;
        row.className = "event";
        row.dataset.type = type;
        row.append(element("td", "", type), element("td", "fields", JSON.stringify(fields)));
      }
      body.append(row);
    });
  });
  $("event-count").textContent = String(count);
}

function fillParse(source, answer) {
  const choice = answer.choices[0];
  const message = choice.message;
  $("reasoning").textContent = message.reasoning_content || "";
  $("content").textContent = message.content || "";
  const calls = $("calls");
  calls.replaceChildren();
  for (const call of message.tool_calls || []) {
    const item = element("li", "call");
    item.append(element("code", "call-name", call.function.name));
    let args = call.function.arguments;
    try {
      args = JSON.stringify(JSON.parse(args), null, 2);
    } catch (_) {
      // shown as sent
    }
    item.append(element("pre", "call-arguments", args));
    calls.append(item);
  }
  $("call-count").textContent = String((message.tool_calls || []).length);
  const diagnostics = $("diagnostics");
  diagnostics.replaceChildren();
  for (const d of answer.parse_diagnostics) {
    const item = element("li", "diagnostic");
    item.append(element("code", "", d.kind), " " + d.message);
    if (d.text) {
      item.append(element("pre", "", d.text));
    }
    diagnostics.append(item);
  }
  $("diagnostic-count").textContent = String(answer.parse_diagnostics.length);
  $("finish").textContent = choice.finish_reason;
  lastStream = answer.stream;
  paintSpans($("highlighted"), source, sourceSpans(source, answer.stream));
  fillEvents(answer.stream);
  $("parse-result").hidden = false;
  $("replay").disabled = false;
}

async function parse() {
  const source = $("source").value;
  const chunk = parseInt($("chunk-size").value, 10);
  const body = {
    text: source,
    start_in: $("thinking").checked ? "reasoning" : "content",
    finish_reason: $("finish-reason").value,
    chunk_size: chunk > 0 ? chunk : Math.max(1, source.length),
  };
  if ($("dialect").value) {
    body.dialect = $("dialect").value;
  }
  showError($("parse-error"), null);
  try {
    fillParse(source, await post("/v1/parse", JSON.stringify(body)));
  } catch (error) {
    showError($("parse-error"), error);
  }
}

// Shows the event rows delta by delta, as a client of a stream would have seen them.
function replay() {
  const rows = Array.from($("events").tBodies[0].rows);
  rows.forEach((row) => row.classList.add("pending"));
  let delta = 0;
  const timer = setInterval(() => {
    rows.filter((row) => row.dataset.delta === String(delta))
      .forEach((row) => row.classList.remove("pending"));
    delta += 1;
    if (delta >= lastStream.length) {
      clearInterval(timer);
    }
  }, 60);
}

async function render() {
  showError($("render-error"), null);
  try {
    const answer = await post(RENDER_ROUTES[$("api").value], $("request").value);
    const prompt = answer.prompt;
    const spans = (answer.special_spans || []).map(([start, end]) => [start, end, "special"]);
    paintSpans($("prompt"), prompt, spans);
    let note = "";
    const images = answer.images;
    let count = answer.prompt_tokens;
    if (count === null && answer.token_ids) {
      count = answer.token_ids.length;
    } else if (count === null) {
      const counted = await post(
        "/tokenize",
        JSON.stringify({ model: answer.model, prompt, add_special_tokens: false }),
      );
      // each image's placeholder counted once, its span in its place
      const placeholders = images ? images.count - images.uncounted.length : 0;
      count = counted.count + (images ? images.tokens - placeholders : 0);
      note = "(counted from the prompt text: this server sends it as text)";
    }
    if (images) {
      note += ` (${images.tokens} of them for ${images.count} image(s)`;
      if (images.uncounted.length) {
        note += `; at least: the size of ${images.uncounted.join(", ")} is not known here`;
      }
      note += ")";
    }
    $("token-count").textContent = String(count);
    $("token-note").textContent = note;
    $("output-starts-in").textContent = answer.output_starts_in;
    $("render-dialect").textContent = answer.dialect;
    const notes = $("render-notes");
    notes.replaceChildren(...answer.notes.map((text) => element("li", "", text)));
    $("render-result").hidden = false;
  } catch (error) {
    showError($("render-error"), error);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("parse").addEventListener("click", parse);
  $("replay").addEventListener("click", replay);
  $("render").addEventListener("click", render);
});
