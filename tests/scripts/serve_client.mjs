// Drives a running `difftx serve` with OpenAI's official client (npm
// openai, data/npm/openai) and with raw HTTP: completions and chat, plain
// and streamed, 16 concurrent clients of mixed lengths, each answer compared
// with `difftx generate` for the same prompt, seed and settings; malformed,
// oversized and unauthorised requests; clients that hang up or stall; the
// server healthy at the end with no slot held. Prints one line per check and
// "N passed, N failed".
//
// usage: node serve_client.mjs URL API_KEY DIFFTX MODEL TOKENIZER CTX
import { execFileSync } from "node:child_process";
import net from "node:net";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const [url, key, difftx, model, tokenizer, ctxArg] = process.argv.slice(2);
const ctx = Number(ctxArg);
const here = path.dirname(fileURLToPath(import.meta.url));
const { default: OpenAI } = await import(pathToFileURL(path.join(here, "../../data/npm/openai/index.mjs")).href);
const client = new OpenAI({ baseURL: url + "/v1", apiKey: key, maxRetries: 0, timeout: 60000 });

let passed = 0, failed = 0, step = "start";
// a promise that never settles would otherwise end node silently
const watchdog = setTimeout(() => {
  console.log(`FAIL watchdog: no progress for 120 s in step '${step}'`);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
}, 120000);
function check(ok, what, detail = "") {
  if (ok) passed++;
  else failed++;
  console.log(`${ok ? "ok  " : "FAIL"} ${what}${ok || !detail ? "" : ": " + detail}`);
}

// what difftx generate prints for the same request (its stdout, bytes as text)
function generate(prompt, { max_tokens, temperature, seed, top_p = 1 }) {
  return execFileSync(difftx, ["generate", "--model", model, "--tokenizer", tokenizer, "--prompt", prompt,
    "--max-tokens", String(max_tokens), "--temperature", String(temperature), "--seed", String(seed),
    "--top-p", String(top_p)], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
}
const chatPrompt = (msgs) =>
  msgs.map((m) => `${m.role[0].toUpperCase()}${m.role.slice(1)}: ${m.content}\n\n`).join("") + "Assistant:";

async function post(route, body, { headers = {}, raw = false } = {}) {
  const r = await fetch(url + route, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${key}`, ...headers },
    body: raw ? body : JSON.stringify(body),
  });
  let j = null;
  try { j = await r.json(); } catch { /* not JSON */ }
  return { status: r.status, json: j };
}
const health = async () => (await fetch(url + "/health")).json();

// ---- what difftx generate says, all computed first (the event loop must not
// stall between requests: a pooled connection the server closed meanwhile
// would be reused)
const prompt = "The people of the United States";
const settings = { max_tokens: 24, temperature: 0.8, seed: 42 };
const want = generate(prompt, settings);
const messages = [{ role: "system", content: "You answer briefly." }, { role: "user", content: "What is a nation?" }];
const chatSettings = { max_tokens: 20, temperature: 0.7, seed: 7 };
const wantChat = generate(chatPrompt(messages), chatSettings);
const jobs = [];
for (let i = 0; i < 16; i++) {
  const p = ["Four score and seven years", "We the people", "In the course of human events", "The state of the union"][i % 4];
  const s = { max_tokens: 4 + ((i * 11) % 57), temperature: i % 3 ? 0.9 : 0, seed: 1000 + i };
  jobs.push({ p, s, stream: i % 2 === 1, want: generate(p, s) });
}

// ---- the models
const models = await client.models.list();
check(models.data.length >= 1 && models.data[0].object === "model", "models.list", JSON.stringify(models.data));

// ---- completions, plain and streamed, against difftx generate
const c1 = await client.completions.create({ model: "m", prompt, ...settings });
check(c1.choices[0].text === want, "completion equals difftx generate", `${JSON.stringify(c1.choices[0].text)} vs ${JSON.stringify(want)}`);
check(c1.usage && c1.usage.completion_tokens > 0 && c1.usage.total_tokens === c1.usage.prompt_tokens + c1.usage.completion_tokens,
  "completion usage", JSON.stringify(c1.usage));
let streamed = "", finish = null, usage = null;
for await (const ch of await client.completions.create({ model: "m", prompt, ...settings, stream: true,
  stream_options: { include_usage: true } })) {
  if (ch.choices.length) { streamed += ch.choices[0].text; finish = ch.choices[0].finish_reason || finish; }
  if (ch.usage) usage = ch.usage;
}
check(streamed === want, "streamed completion equals difftx generate", `${JSON.stringify(streamed)} vs ${JSON.stringify(want)}`);
check(finish === c1.choices[0].finish_reason && usage && usage.completion_tokens === c1.usage.completion_tokens,
  "stream's finish_reason and usage", `${finish} ${JSON.stringify(usage)}`);

// ---- chat, plain and streamed
const r1 = await client.chat.completions.create({ model: "m", messages, ...chatSettings });
check(r1.choices[0].message.role === "assistant" && r1.choices[0].message.content === wantChat, "chat equals difftx generate",
  `${JSON.stringify(r1.choices[0].message.content)} vs ${JSON.stringify(wantChat)}`);
let chatStreamed = "", role = null;
for await (const ch of await client.chat.completions.create({ model: "m", messages, ...chatSettings, stream: true })) {
  const d = ch.choices[0]?.delta || {};
  if (d.role) role = d.role;
  if (d.content) chatStreamed += d.content;
}
check(role === "assistant" && chatStreamed === wantChat, "streamed chat equals difftx generate", JSON.stringify(chatStreamed));

// ---- 16 concurrent clients of mixed lengths, half streaming
const t0 = Date.now();
const answers = await Promise.all(jobs.map(async ({ p, s, stream }) => {
  if (!stream) return (await client.completions.create({ model: "m", prompt: p, ...s })).choices[0].text;
  let t = "";
  for await (const ch of await client.completions.create({ model: "m", prompt: p, ...s, stream: true }))
    if (ch.choices.length) t += ch.choices[0].text;
  return t;
}));
const wall = (Date.now() - t0) / 1000;
const differ = jobs.map((j, i) => i).filter((i) => answers[i] !== jobs[i].want);
check(differ.length === 0, "16 concurrent clients each equal difftx generate",
  `${16 - differ.length} of 16 (${wall.toFixed(2)} s); ` +
  differ.map((i) => `#${i} ${JSON.stringify(answers[i])} vs ${JSON.stringify(jobs[i].want)}`).join("; "));
const h1 = await health();
check(h1.batched_tokens > h1.batched_steps, "steps advanced several requests at once",
  `${h1.batched_tokens} tokens in ${h1.batched_steps} steps`);

// ---- bad requests: each a 4xx in OpenAI's error format
async function refused(what, route, body, status, opts = {}) {
  const r = await post(route, body, opts);
  check(r.status === status && r.json && r.json.error && typeof r.json.error.message === "string",
    `refused: ${what} (${status})`, `${r.status} ${JSON.stringify(r.json)}`);
  return r;
}
await refused("malformed JSON", "/v1/completions", '{"prompt": "x",', 400, { raw: true });
await refused("a body that is not UTF-8", "/v1/completions", Buffer.from([0x7b, 0x22, 0x70, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d]), 400, { raw: true });
await refused("an unknown field", "/v1/completions", { prompt: "x", temprature: 1 }, 400);
await refused("n = 2", "/v1/completions", { prompt: "x", n: 2 }, 400);
await refused("a wrong type", "/v1/chat/completions", { messages: "hi" }, 400);
await refused("a body over --max-body", "/v1/completions", { prompt: "x".repeat(70000) }, 413);
const long = await refused("a prompt longer than the context", "/v1/completions", { prompt: "word ".repeat(ctx * 2) }, 400);
check(long.json && long.json.error.code === "context_length_exceeded", "its code is context_length_exceeded", JSON.stringify(long.json));
await refused("max_tokens past the context", "/v1/completions", { prompt: "x", max_tokens: ctx }, 400);
await refused("a token id past the vocabulary", "/v1/completions", { prompt: [1, 99999999] }, 400);
await refused("no API key", "/v1/completions", { prompt: "x" }, 401, { headers: { Authorization: "" } });
await refused("POST on a GET route", "/v1/models", {}, 405);
const nokey = new OpenAI({ baseURL: url + "/v1", apiKey: "wrong", maxRetries: 0 });
try { await nokey.models.list(); check(false, "the client with a wrong key is refused"); }
catch (e) { check(e.status === 401, "the client with a wrong key is refused (401)", String(e)); }
const r404 = await fetch(url + "/v2/nothing");
check(r404.status === 404, "an unknown route is 404", String(r404.status));
const tok = await post("/tokenize", { content: "Hello world", add_special: false });
const detok = await post("/detokenize", { tokens: tok.json.tokens });
check(tok.status === 200 && detok.json.content === "Hello world", "tokenize then detokenize", JSON.stringify([tok.json, detok.json]));
// a NUL byte (id 0 of a byte-level vocabulary) survives into the JSON text, as generate prints it
const first = (await post("/detokenize", { tokens: [tok.json.tokens[0]] })).json.content;
const nul = await post("/detokenize", { tokens: [tok.json.tokens[0], 0, tok.json.tokens[0]] });
check(nul.status === 200 && nul.json.content === first + "\u0000" + first, "a NUL byte kept in JSON text",
  JSON.stringify(nul.json));

// ---- clients that go away: a stream aborted after its first piece, a plain request whose socket closes
step = "hang-ups";
const ac = new AbortController();
try {
  const r = await fetch(url + "/v1/completions", {
    method: "POST", signal: ac.signal, headers: { Authorization: `Bearer ${key}` },
    body: JSON.stringify({ prompt: "We", max_tokens: ctx - 8, temperature: 1, stream: true }),
  });
  await r.body.getReader().read(); // the first piece, then hang up
  ac.abort();
} catch { /* aborted */ }
await new Promise((done) => {
  const sock = net.connect(new URL(url).port, "127.0.0.1", () => {
    const body = JSON.stringify({ prompt: "We", max_tokens: ctx - 8, temperature: 1 });
    sock.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    setTimeout(() => { sock.destroy(); done(); }, 100);
  });
});
let freed = false;
for (let i = 0; i < 50 && !freed; i++) {
  const h = await health();
  freed = h.slots_busy === 0 && h.queued === 0;
  if (!freed) await new Promise((r) => setTimeout(r, 100));
}
check(freed, "clients that hung up free their slots within 5 s", JSON.stringify(await health()));

step = "stall";
// ---- a client that stalls mid-request is timed out; others are served meanwhile
const stalled = await new Promise((done) => {
  const sock = net.connect(new URL(url).port, "127.0.0.1", () => {
    sock.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro");
  });
  const t = Date.now();
  sock.on("close", () => done((Date.now() - t) / 1000));
  sock.on("error", () => {});
  setTimeout(() => { sock.destroy(); done(-1); }, 15000);
  client.completions.create({ model: "m", prompt: "x", max_tokens: 3 }).then(
    (r) => check(r.choices.length === 1, "served while another client stalls"),
    (e) => check(false, "served while another client stalls", String(e)));
});
check(stalled > 0, "a stalled client is disconnected by the timeout", `after ${stalled} s`);

const h2 = await health();
check(h2.status === "ok" && h2.slots_busy === 0 && h2.queued === 0, "healthy at the end, no slot held", JSON.stringify(h2));
clearTimeout(watchdog);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
