// E2e driver: multi-turn Vercel AI SDK conversations with the SDK's built-in OpenTelemetry.
//
// Each turn is one `generateText` call (one trace, root `ai.generateText`) over the conversation's
// messages so far, which the app keeps (the AI SDK has no memory of its own) and extends with the
// turn's `response.messages`. The app names the conversation and the user the way the AI SDK's
// telemetry carries app data: `experimental_telemetry.metadata` `{ sessionId, userId }`, exported on
// every span as `ai.telemetry.metadata.sessionId` / `.userId`. The truth records, per turn, the ids
// the driver set (tests/e2e/drivers/harness.py RunTruth fields plus session_id, user_id, turn), and
// per conversation its scripted signals (harness.SessionTruth): re-asks, abandonment, a human request.
//
// Each conversation is one fake-server script registered `sequential` (turn k gets the answers after
// those of the turns before it); its marker is in the system prompt. Conversations:
//   vas_weather (user jane): Paris's weather; the user asks again, rephrased (re-ask, turn 1); then
//     asks for a human (turn 2).
//   vas_filtered (user kim): a greeting, then an answer stopped by the content filter; the user
//     leaves (abandoned).
//   vas_orders (no user id): the order tool throws, the model says so; the user thanks it.
//   vas_single: one run with no session metadata: a session of one.
//
// Run: node driver.mjs --openai-base-url http://127.0.0.1:PORT/v1 --capture traces.json --out truth.json
// (see scripts/capture_traces.sh; the OTLP/JSON writer is vercel_ai/driver.mjs's).

import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { createOpenAI } from '@ai-sdk/openai';
import { JsonTraceSerializer } from '@opentelemetry/otlp-transformer';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { generateText, stepCountIs, tool } from 'ai';
import { z } from 'zod';

const DRIVER = 'vercel_ai_sessions';
const SERVICE_NAME = 'vercel-ai-chat';
const AGENT = 'chat_agent';
const API_KEY = 'sk-vigil-e2e-fake';
const SYSTEM = 'You are a helpful travel assistant. Use the tools.';

const { values: args } = parseArgs({
  options: { 'openai-base-url': { type: 'string' }, out: { type: 'string' }, capture: { type: 'string' } },
});
if (!args['openai-base-url']) throw new Error('--openai-base-url is required (scripts/capture_traces.sh starts one)');

class RootRecorder {
  constructor() {
    this.roots = [];
  }
  onStart(span) {
    if (!span.parentSpanContext) this.roots.push([span.spanContext().traceId, span.name]);
  }
  onEnd() {}
  forceFlush() {
    return Promise.resolve();
  }
  shutdown() {
    return Promise.resolve();
  }
}

const memory = new InMemorySpanExporter();
const rootRecorder = new RootRecorder();
const provider = new NodeTracerProvider({
  resource: defaultResource().merge(resourceFromAttributes({ 'service.name': SERVICE_NAME })),
  spanProcessors: [rootRecorder, new SimpleSpanProcessor(memory)],
});
provider.register();

const baseUrl = args['openai-base-url'].replace(/\/+$/, '');
const adminUrl = baseUrl.replace(/\/v1$/, '');
const tag = randomBytes(4).toString('hex');
const model = createOpenAI({ baseURL: baseUrl, apiKey: API_KEY }).chat('gpt-4o-mini');

const call = (name, args) => ({ name, arguments: args });
const toolTurn = (...calls) => ({ type: 'ToolCallTurn', calls });
const textTurn = (text) => ({ type: 'TextTurn', text });
const filterTurn = (text = '') => ({ type: 'ContentFilterTurn', text });

async function register(name, turns, sequential) {
  const response = await fetch(`${adminUrl}/_fake/scripts/${name}`, {
    method: 'PUT',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ turns, sequential }),
  });
  if (!response.ok) throw new Error(`register ${name}: HTTP ${response.status} ${await response.text()}`);
}

async function served(key) {
  const response = await fetch(`${adminUrl}/_fake/requests?scenario=${encodeURIComponent(key)}`);
  return (await response.json()).requests;
}

const runs = [];
const sessions = [];
let current = null;

const tools = {
  get_weather: tool({
    description: 'Current weather',
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      current.tool_calls += 1;
      return `It is 21 C and sunny in ${city}.`;
    },
  }),
  lookup_order: tool({
    description: 'Order status',
    inputSchema: z.object({ order_id: z.string() }),
    execute: async ({ order_id }) => {
      current.tool_calls += 1;
      current.tool_errors += 1;
      throw new Error(`order ${order_id} not found`);
    },
  }),
};

/** One turn (one trace): the scenario's RunTruth, with only the requests served while it ran counted. */
async function turn(scenario, key, body, ids) {
  const run = {
    scenario, agent: AGENT, key, marker: `[[scenario:${key}]]`, trace_id: '', root_span: '',
    llm_calls: 0, tool_calls: 0, tool_errors: 0, input_tokens: 0, output_tokens: 0,
    hit_max_iterations: false, safety_blocked: false, errored: false, exception: null,
    finish_kinds: [], rejected_kinds: [], served_input_tokens: 0, served_output_tokens: 0,
    session_id: ids.session_id, user_id: ids.user_id, turn: ids.turn,
  }; // prettier-ignore
  const since = (await served(key)).length;
  const before = rootRecorder.roots.length;
  current = run;
  try {
    const steps = await body(run);
    run.safety_blocked = steps.some((s) => s.finishReason === 'content-filter');
  } catch (error) {
    run.errored = true;
    run.exception = error?.name ?? String(error);
  } finally {
    current = null;
  }
  const roots = rootRecorder.roots.slice(before);
  if (roots.length !== 1) throw new Error(`${scenario} started ${roots.length} root spans`);
  [run.trace_id, run.root_span] = roots[0];
  const entries = (await served(key)).slice(since);
  const sum = (field) => entries.filter((e) => e.usage_reported).reduce((t, e) => t + e[field], 0);
  run.llm_calls = entries.length;
  run.input_tokens = run.served_input_tokens = sum('prompt_tokens');
  run.output_tokens = run.served_output_tokens = sum('completion_tokens');
  run.finish_kinds = entries.map((e) => e.kind);
  run.safety_blocked ||= run.finish_kinds.includes('content_filter');
  runs.push(run);
  return run;
}

/** A conversation: the app's message list, one sequential script, the ids it sends with each turn. */
async function conversation(name, sessionId, userId, script, plan) {
  const key = `${name}#${tag}`;
  await register(name, script, true);
  const truth = {
    name, agent: AGENT, session_id: sessionId, user_id: userId, traces: [],
    signals: { reask: [], abandoned: false, human_request: [] },
  }; // prettier-ignore
  sessions.push(truth);
  const messages = [];
  const metadata = userId ? { sessionId, userId } : { sessionId };
  for (const [index, step] of plan.entries()) {
    messages.push({ role: 'user', content: step.say });
    const run = await turn(
      `${name}_t${index}`,
      key,
      async () => {
        const result = await generateText({
          model,
          system: `[[scenario:${key}]] ${SYSTEM}`,
          messages,
          tools,
          stopWhen: stepCountIs(5),
          experimental_telemetry: { isEnabled: true, functionId: AGENT, recordInputs: true, recordOutputs: true, metadata },
        });
        messages.push(...result.response.messages);
        return result.steps;
      },
      { session_id: sessionId, user_id: userId, turn: index },
    );
    truth.traces.push(run.trace_id);
    if (step.reask) truth.signals.reask.push(index);
    if (step.human) truth.signals.human_request.push(index);
  }
  truth.signals.abandoned = plan.at(-1).abandoned === true;
}

// ---------------------------------------------------------------------------------------------
// OTLP/JSON in the fixtures' format (as vercel_ai/driver.mjs writes it)

function protoJson(value, key = '') {
  if (Array.isArray(value)) return value.map((v) => protoJson(v));
  if (value !== null && typeof value === 'object') {
    const out = {};
    const isAnyValue = ['stringValue', 'boolValue', 'intValue', 'doubleValue', 'arrayValue', 'kvlistValue', 'bytesValue']
      .some((k) => k in value); // prettier-ignore
    for (const [k, v] of Object.entries(value)) {
      if (isAnyValue) {
        if (v === undefined || v === null) continue;
        out[k] = k === 'intValue' ? String(v) : protoJson(v, k);
        continue;
      }
      if (v === undefined || v === null || v === 0 || v === '' || (Array.isArray(v) && v.length === 0)) continue;
      out[k] = protoJson(v, k);
    }
    return out;
  }
  if (key.endsWith('UnixNano')) return String(value);
  return value;
}

function otlpJson(spans) {
  const ns = (s) => BigInt(s.startTime[0]) * 1_000_000_000n + BigInt(s.startTime[1]);
  const ordered = [...spans].sort((a, b) =>
    ns(a) < ns(b) ? -1 : ns(a) > ns(b) ? 1 : a.spanContext().spanId.localeCompare(b.spanContext().spanId),
  );
  const data = JSON.parse(new TextDecoder().decode(JsonTraceSerializer.serializeRequest(ordered)));
  for (const resource of data.resourceSpans ?? [])
    for (const scope of resource.scopeSpans ?? []) for (const span of scope.spans ?? []) span.status ??= {};
  return protoJson(data);
}

// ---------------------------------------------------------------------------------------------

await conversation(
  'vas_weather',
  `va-chat-weather-${tag}`,
  'jane',
  [
    toolTurn(call('get_weather', { city: 'Paris' })),
    textTurn('It is 21 C and sunny in Paris.'),
    toolTurn(call('get_weather', { city: 'Paris' })),
    textTurn('Paris is at 21 C, sunny.'),
    textTurn('I am handing you over to a human colleague.'),
  ],
  [
    { say: 'What is the weather in Paris?' },
    { say: 'Sorry, so how warm is it in Paris right now?', reask: true },
    { say: 'Can I please talk to a real person?', human: true },
  ],
);
await conversation(
  'vas_filtered',
  `va-chat-filtered-${tag}`,
  'kim',
  [textTurn('Hello! How can I help?'), filterTurn('')],
  [{ say: 'Hi.' }, { say: 'Write something your filter blocks.', abandoned: true }],
);
await conversation(
  'vas_orders',
  `va-chat-orders-${tag}`,
  null,
  [toolTurn(call('lookup_order', { order_id: 'A-404' })), textTurn('I could not find order A-404.'), textTurn('You are welcome.')],
  [{ say: 'Where is my order A-404?' }, { say: 'Thanks, I will check the number.' }],
);
await register('vas_single', [toolTurn(call('get_weather', { city: 'Oslo' })), textTurn('Oslo: 21 C.')], false);
await turn(
  'vas_single',
  `vas_single#${tag}`,
  async (run) =>
    (
      await generateText({
        model,
        prompt: `${run.marker} Weather in Oslo?`,
        tools,
        stopWhen: stepCountIs(5),
        experimental_telemetry: { isEnabled: true, functionId: AGENT, recordInputs: true, recordOutputs: true },
      })
    ).steps,
  { session_id: null, user_id: null, turn: null },
);

await provider.forceFlush();
if (args.out) {
  const truth = { driver: DRIVER, service_name: SERVICE_NAME, runs, sessions };
  writeFileSync(args.out, JSON.stringify(truth, null, 2) + '\n');
}
if (args.capture) writeFileSync(args.capture, JSON.stringify(otlpJson(memory.getFinishedSpans()), null, 1) + '\n');
for (const run of runs) console.error(JSON.stringify(run));
await provider.shutdown();
