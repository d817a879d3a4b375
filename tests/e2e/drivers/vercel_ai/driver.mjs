// E2e driver: Vercel AI SDK agent loops with the SDK's built-in OpenTelemetry.
//
// The AI SDK (`ai`, with `@ai-sdk/openai` pointed at the scripted fake server) records its own
// spans (`ai.generateText`, `ai.generateText.doGenerate`, `ai.toolCall`, `ai.streamText`, ...)
// through `experimental_telemetry`; the OTel JS SDK keeps them in memory. Each scenario is one
// agent run, one trace and one root span; the agent name is the telemetry `functionId` (and the
// `agent` metadata). Scenarios (see SCENARIOS below): a tool then an answer (ToolLoopAgent, Responses
// API), parallel tool calls, a throwing tool, the step limit (`stopWhen: stepCountIs(n)`, the run
// just ends while the model still asks for tools), a content filter on the first answer and after
// a tool, refusals (Chat and Responses), HTTP 500 without retries and with one retry, and streamText
// variants (normal, step limit, content filter, HTTP 500). Pinned to AI SDK 6: `ai` 7 needs Node >= 22
// and moved telemetry out of the SDK (tests/fixtures/traces/vercel_ai.md).
//
// Ground truth is what the driver observed: tool executions from the tool functions, the flags
// from what reached the caller (exceptions) and the steps (finish reasons, step count), LLM calls
// and tokens from the fake server's request log (as tests/e2e/drivers/harness.py does).
//
// Run: node driver.mjs --openai-base-url http://127.0.0.1:PORT/v1 --capture traces.json --out truth.json
// Without --openai-base-url a private fake server is started from the repository's .venv.

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { createOpenAI } from '@ai-sdk/openai';
import { JsonTraceSerializer } from '@opentelemetry/otlp-transformer';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { generateText, stepCountIs, streamText, tool, ToolLoopAgent } from 'ai';
import { z } from 'zod';

const DRIVER = 'vercel_ai';
const SERVICE_NAME = 'vercel-ai-agents';
const MODEL = 'gpt-4o-mini';
const API_KEY = 'sk-vigil-e2e-fake';
const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, '../../../..');

// ---------------------------------------------------------------------------------------------
// Arguments, tracer provider, fake server

const { values: args } = parseArgs({
  options: {
    'openai-base-url': { type: 'string' },
    out: { type: 'string' },
    capture: { type: 'string' },
  },
});

/** Records the trace id and name of every root span, in start order (like harness._RootRecorder). */
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
provider.register(); // global tracer + AsyncLocalStorage context manager (parent/child across awaits)

/** Start `python -m collector.demo.fakeopenai --serve` when no server was given. */
async function startFake() {
  const dir = mkdtempSync(join(tmpdir(), 'vigil-fake-'));
  const portFile = join(dir, 'port');
  const python = join(REPO, '.venv/bin/python');
  const child = spawn(python, ['-m', 'collector.demo.fakeopenai', '--serve', '--port-file', portFile], {
    cwd: REPO,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  for (let i = 0; i < 200 && !existsSync(portFile); i++) await new Promise((r) => setTimeout(r, 50));
  const port = readFileSync(portFile, 'utf8').trim();
  rmSync(dir, { recursive: true, force: true });
  return { child, baseUrl: `http://127.0.0.1:${port}/v1` };
}

const fake = args['openai-base-url'] ? null : await startFake();
const baseUrl = (args['openai-base-url'] ?? fake.baseUrl).replace(/\/+$/, '');
const adminUrl = baseUrl.replace(/\/v1$/, '');
const tag = randomBytes(4).toString('hex');
const openai = createOpenAI({ baseURL: baseUrl, apiKey: API_KEY });

// Scripted turns in the JSON form of collector.demo.fakeopenai.turn_to_json.
const call = (name, args) => ({ name, arguments: args });
const toolTurn = (...calls) => ({ type: 'ToolCallTurn', calls });
const textTurn = (text) => ({ type: 'TextTurn', text });
const filterTurn = (text = '') => ({ type: 'ContentFilterTurn', text });
const errorTurn = (status, message, code) => ({ type: 'ErrorTurn', status, message, code });
const refusalTurn = (refusal) => ({ type: 'RefusalTurn', refusal });

async function register(name, turns) {
  const response = await fetch(`${adminUrl}/_fake/scripts/${name}`, {
    method: 'PUT',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ turns }),
  });
  if (!response.ok) throw new Error(`register ${name}: HTTP ${response.status} ${await response.text()}`);
}

async function served(key) {
  const response = await fetch(`${adminUrl}/_fake/requests?scenario=${encodeURIComponent(key)}`);
  return (await response.json()).requests;
}

// ---------------------------------------------------------------------------------------------
// Ground truth (the RunTruth fields of tests/e2e/drivers/harness.py, in its order)

function newRun(scenario, agent) {
  const key = `${scenario}#${tag}`;
  return {
    scenario,
    agent,
    key,
    marker: `[[scenario:${key}]]`,
    trace_id: '',
    root_span: '',
    llm_calls: 0,
    tool_calls: 0,
    tool_errors: 0,
    input_tokens: 0,
    output_tokens: 0,
    hit_max_iterations: false,
    safety_blocked: false,
    errored: false,
    exception: null,
    finish_kinds: [],
    rejected_kinds: [],
    served_input_tokens: 0,
    served_output_tokens: 0,
  };
}

const runs = [];
let current = null; // the run whose tools are executing (scenarios run one at a time)

async function addServed(run) {
  const entries = await served(run.key);
  run.llm_calls = entries.length;
  const reported = entries.filter((e) => e.usage_reported);
  const accepted = reported.filter((e) => !run.rejected_kinds.includes(e.kind));
  const sum = (list, field) => list.reduce((total, e) => total + e[field], 0);
  run.served_input_tokens = sum(reported, 'prompt_tokens');
  run.served_output_tokens = sum(reported, 'completion_tokens');
  run.input_tokens = sum(accepted, 'prompt_tokens');
  run.output_tokens = sum(accepted, 'completion_tokens');
  run.finish_kinds = entries.map((e) => e.kind);
  run.safety_blocked ||= run.finish_kinds.some((kind) => kind === 'content_filter' || kind === 'refusal');
}

/**
 * Run one scenario: `body(run)` returns the AI SDK result's steps (or throws). An exception
 * reaching here is recorded as `errored`; the steps give the step-limit and content-filter flags.
 */
async function scenario(name, agent, body, { stepLimit = null } = {}) {
  const run = newRun(name, agent);
  const before = rootRecorder.roots.length;
  current = run;
  try {
    const steps = await body(run);
    const last = steps.at(-1);
    run.hit_max_iterations = stepLimit != null && steps.length === stepLimit && last?.finishReason === 'tool-calls';
    run.safety_blocked = steps.some((s) => s.finishReason === 'content-filter');
    console.error(`${name}: ${steps.length} steps, finish reasons ${steps.map((s) => s.finishReason).join(', ')}`);
  } catch (error) {
    run.errored = true;
    run.exception = error?.name ?? String(error);
    console.error(`${name}: ${run.exception}: ${error?.message}`);
  } finally {
    current = null;
  }
  const roots = rootRecorder.roots.slice(before);
  if (roots.length !== 1)
    throw new Error(`scenario ${name} started ${roots.length} root spans: ${JSON.stringify(roots)}`);
  [run.trace_id, run.root_span] = roots[0];
  await addServed(run);
  runs.push(run);
}

// ---------------------------------------------------------------------------------------------
// Tools and agents

class OrderNotFoundError extends Error {
  constructor(message) {
    super(message);
    this.name = 'OrderNotFoundError';
  }
}

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
      throw new OrderNotFoundError(`order ${order_id} not found`);
    },
  }),
};

/** The telemetry settings of one agent run: functionId = agent name, metadata for the rest. */
const telemetry = (agent, run) => ({
  isEnabled: true,
  functionId: agent,
  recordInputs: true,
  recordOutputs: true,
  metadata: { agent, scenario: run.scenario },
});

const responsesModel = openai(MODEL); // AI SDK 5+ default: the Responses API
const chatModel = openai.chat(MODEL); // Chat Completions

function agentFor(name, model, run, settings = {}) {
  return new ToolLoopAgent({
    id: name,
    model,
    instructions: 'You are a helpful assistant. Use the tools.',
    tools,
    experimental_telemetry: telemetry(name, run),
    ...settings,
  });
}

/** Drain a streamText result the way an app would, then return its steps. */
async function drain(result) {
  const chunks = [];
  for await (const delta of result.textStream) chunks.push(delta); // what a chat UI would render
  return await result.steps;
}

const SCENARIOS = [
  {
    name: 'va_normal',
    agent: 'weather_agent',
    turns: [toolTurn(call('get_weather', { city: 'Paris' })), textTurn('Sunny, 21 C in Paris.')],
    run: async (run) =>
      (await agentFor('weather_agent', responsesModel, run).generate({ prompt: `${run.marker} Weather in Paris?` }))
        .steps,
  },
  {
    name: 'va_parallel',
    agent: 'weather_agent',
    turns: [
      toolTurn(call('get_weather', { city: 'Paris' }), call('get_weather', { city: 'Berlin' })),
      textTurn('Sunny in both.'),
    ],
    run: async (run) =>
      (
        await generateText({
          model: responsesModel,
          tools,
          stopWhen: stepCountIs(5),
          prompt: `${run.marker} Weather in Paris and Berlin?`,
          experimental_telemetry: telemetry('weather_agent', run),
        })
      ).steps,
  },
  {
    name: 'va_tool_error',
    agent: 'orders_agent',
    turns: [toolTurn(call('lookup_order', { order_id: 'A-404' })), textTurn('No such order.')],
    run: async (run) =>
      (
        await generateText({
          model: chatModel,
          tools,
          stopWhen: stepCountIs(5),
          prompt: `${run.marker} Where is order A-404?`,
          experimental_telemetry: telemetry('orders_agent', run),
        })
      ).steps,
  },
  {
    name: 'va_step_limit',
    agent: 'planner_agent',
    stepLimit: 3,
    turns: [toolTurn(call('get_weather', { city: 'Paris' }))], // repeats: the model never stops asking
    run: async (run) =>
      (
        await agentFor('planner_agent', responsesModel, run, { stopWhen: stepCountIs(3) }).generate({
          prompt: `${run.marker} Plan a week in Paris.`,
        })
      ).steps,
  },
  {
    name: 'va_content_filter',
    agent: 'weather_agent',
    turns: [filterTurn('I can')],
    run: async (run) =>
      (
        await generateText({
          model: chatModel,
          tools,
          stopWhen: stepCountIs(5),
          prompt: `${run.marker} Tell me something bad.`,
          experimental_telemetry: telemetry('weather_agent', run),
        })
      ).steps,
  },
  {
    name: 'va_tool_then_filter',
    agent: 'weather_agent',
    turns: [toolTurn(call('get_weather', { city: 'Paris' })), filterTurn('')],
    run: async (run) =>
      (
        await agentFor('weather_agent', responsesModel, run).generate({
          prompt: `${run.marker} Weather in Paris, then something bad.`,
        })
      ).steps,
  },
  {
    name: 'va_refusal',
    agent: 'weather_agent',
    turns: [toolTurn(call('get_weather', { city: 'Paris' })), refusalTurn("I'm sorry, but I can't help with that.")],
    run: async (run) =>
      (
        await generateText({
          model: chatModel,
          tools,
          stopWhen: stepCountIs(5),
          prompt: `${run.marker} Weather in Paris, then something bad.`,
          experimental_telemetry: telemetry('weather_agent', run),
        })
      ).steps,
  },
  {
    name: 'va_refusal_responses',
    agent: 'weather_agent',
    turns: [refusalTurn("I'm sorry, but I can't help with that.")],
    run: async (run) =>
      (await agentFor('weather_agent', responsesModel, run).generate({ prompt: `${run.marker} Something bad.` })).steps,
  },
  {
    name: 'va_api_error',
    agent: 'orders_agent',
    turns: [errorTurn(500, 'The server had an error while processing your request.', 'server_error')],
    run: async (run) =>
      (
        await generateText({
          model: chatModel,
          tools,
          maxRetries: 0,
          stopWhen: stepCountIs(5),
          prompt: `${run.marker} Where is order A-1?`,
          experimental_telemetry: telemetry('orders_agent', run),
        })
      ).steps,
  },
  {
    name: 'va_api_retry',
    agent: 'orders_agent',
    turns: [errorTurn(500, 'The server had an error while processing your request.', 'server_error')],
    run: async (run) =>
      (
        await generateText({
          model: chatModel,
          tools,
          maxRetries: 1, // two requests at the server, one doGenerate span
          stopWhen: stepCountIs(5),
          prompt: `${run.marker} Where is order A-2?`,
          experimental_telemetry: telemetry('orders_agent', run),
        })
      ).steps,
  },
  {
    name: 'va_stream',
    agent: 'weather_agent',
    turns: [toolTurn(call('get_weather', { city: 'Paris' })), textTurn('Sunny, 21 C in Paris.')],
    run: async (run) =>
      drain(await agentFor('weather_agent', chatModel, run).stream({ prompt: `${run.marker} Weather in Paris?` })),
  },
  {
    name: 'va_stream_step_limit',
    agent: 'planner_agent',
    stepLimit: 2,
    turns: [toolTurn(call('get_weather', { city: 'Paris' }))],
    run: async (run) =>
      drain(
        streamText({
          model: chatModel,
          tools,
          stopWhen: stepCountIs(2),
          prompt: `${run.marker} Plan a week in Paris.`,
          experimental_telemetry: telemetry('planner_agent', run),
        }),
      ),
  },
  {
    name: 'va_stream_filter',
    agent: 'weather_agent',
    turns: [toolTurn(call('get_weather', { city: 'Paris' })), filterTurn('I can')],
    run: async (run) =>
      drain(
        streamText({
          model: chatModel,
          tools,
          stopWhen: stepCountIs(5),
          prompt: `${run.marker} Weather in Paris, then something bad.`,
          experimental_telemetry: telemetry('weather_agent', run),
        }),
      ),
  },
  {
    name: 'va_stream_api_error',
    agent: 'orders_agent',
    turns: [errorTurn(500, 'The server had an error while processing your request.', 'server_error')],
    run: async (run) =>
      drain(
        streamText({
          model: chatModel,
          tools,
          maxRetries: 0,
          stopWhen: stepCountIs(5),
          prompt: `${run.marker} Where is order A-3?`,
          experimental_telemetry: telemetry('orders_agent', run),
          onError: () => {}, // the app handles the error where it awaits the result
        }),
      ),
  },
];

// ---------------------------------------------------------------------------------------------
// OTLP/JSON in the fixtures' format (protobuf JSON mapping as MessageToDict writes it)

/** Drop what proto3 JSON omits (zero, "", empty lists) and write int64 attribute values as strings. */
function protoJson(value, key = '') {
  if (Array.isArray(value)) return value.map((v) => protoJson(v));
  if (value !== null && typeof value === 'object') {
    const out = {};
    const isAnyValue = [
      'stringValue',
      'boolValue',
      'intValue',
      'doubleValue',
      'arrayValue',
      'kvlistValue',
      'bytesValue',
    ].some((k) => k in value);
    for (const [k, v] of Object.entries(value)) {
      if (isAnyValue) {
        // a oneof member is kept even at its default value
        if (v === undefined || v === null) continue;
        out[k] = k === 'intValue' ? String(v) : protoJson(v, k);
        continue;
      }
      if (v === undefined || v === null || v === 0 || v === '' || (Array.isArray(v) && v.length === 0)) continue;
      out[k] = protoJson(v, k);
    }
    // status is a message: present (maybe empty) on every span
    return out;
  }
  if (key.endsWith('UnixNano')) return String(value);
  return value;
}

function otlpJson(spans) {
  const ordered = [...spans].sort((a, b) => {
    const ta = BigInt(a.startTime[0]) * 1_000_000_000n + BigInt(a.startTime[1]);
    const tb = BigInt(b.startTime[0]) * 1_000_000_000n + BigInt(b.startTime[1]);
    return ta < tb ? -1 : ta > tb ? 1 : a.spanContext().spanId.localeCompare(b.spanContext().spanId);
  });
  const data = JSON.parse(new TextDecoder().decode(JsonTraceSerializer.serializeRequest(ordered)));
  for (const resource of data.resourceSpans ?? []) {
    for (const scope of resource.scopeSpans ?? []) {
      for (const span of scope.spans ?? []) span.status ??= {};
    }
  }
  return protoJson(data);
}

// ---------------------------------------------------------------------------------------------

try {
  for (const s of SCENARIOS) await register(s.name, s.turns);
  for (const s of SCENARIOS) await scenario(s.name, s.agent, s.run, { stepLimit: s.stepLimit ?? null });
  await provider.forceFlush();
  const spans = memory.getFinishedSpans();
  if (args.out) {
    const truth = { driver: DRIVER, service_name: SERVICE_NAME, runs };
    writeFileSync(args.out, JSON.stringify(truth, null, 2) + '\n');
  }
  if (args.capture) writeFileSync(args.capture, JSON.stringify(otlpJson(spans), null, 1) + '\n');
  for (const run of runs) console.error(JSON.stringify(run));
  await provider.shutdown();
} finally {
  if (fake) fake.child.kill('SIGTERM');
}
