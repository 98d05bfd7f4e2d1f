// The official JS clients against a running llmkube gateway: the OpenAI SDK (openai), the
// Ollama SDK (ollama), Anthropic's SDK (@anthropic-ai/sdk, /v1/messages) and the AI SDK (ai +
// @ai-sdk/openai, whose openai(model) calls /v1/responses). Run by the Go test TestJSClients, which starts the agents and sets:
//   GATEWAY  the agent's base URL      TOKEN  a token for the model's namespace
//   MODEL    the model to use          TOOLS  "1" when the engine calls tools
//   EMBED    "1" when the model embeds  RESPONSES "1" to run the AI SDK (/v1/responses)
// Each check prints one line; the first failure exits 1 with what went wrong.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { Ollama } from 'ollama';
import Anthropic from '@anthropic-ai/sdk';
import { generateText, streamText, tool, jsonSchema, stepCountIs } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';

const { GATEWAY, TOKEN, MODEL } = process.env;
const TOOLS = process.env.TOOLS === '1';
const EMBED = process.env.EMBED === '1';
assert.ok(GATEWAY && TOKEN && MODEL, 'GATEWAY, TOKEN and MODEL must be set');

const weather = {
  type: 'function',
  function: {
    name: 'weather',
    description: 'the weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris'] } }, required: ['city'] },
  },
};

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (err) {
    console.log(`FAIL ${name}: ${err && err.stack ? err.stack : err}`);
    process.exit(1);
  }
}

// --- openai ---------------------------------------------------------------------------
const oa = new OpenAI({ baseURL: `${GATEWAY}/v1`, apiKey: TOKEN, maxRetries: 0 });

await check('openai: models.list and models.retrieve', async () => {
  const ids = [];
  for await (const m of oa.models.list()) ids.push(m.id);
  assert.ok(ids.includes(MODEL), `models: ${ids}`);
  assert.equal((await oa.models.retrieve(MODEL)).id, MODEL);
});

await check('openai: chat, not streaming', async () => {
  const r = await oa.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hello, mesh.' }], max_tokens: 8 });
  assert.equal(r.object, 'chat.completion');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(r.usage.total_tokens > 0);
  assert.ok(r.created < 1e11, `created ${r.created} is in seconds`);
});

await check('openai: chat, streaming with usage', async () => {
  const stream = await oa.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Hello, mesh.' }], max_tokens: 8, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      finish = c.finish_reason ?? finish;
    }
    usage = chunk.usage ?? usage;
  }
  assert.ok(text.length > 0);
  assert.ok(['stop', 'length'].includes(finish), `finish ${finish}`);
  assert.ok(usage && usage.completion_tokens > 0);
});

if (TOOLS) {
  await check('openai: tools, not streaming, then the result', async () => {
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const r = await oa.chat.completions.create({ model: MODEL, messages, tools: [weather] });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    const call = r.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, 'weather');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
    messages.push(r.choices[0].message, { role: 'tool', tool_call_id: call.id, content: 'sunny' });
    const after = await oa.chat.completions.create({ model: MODEL, messages, tools: [weather], max_tokens: 8 });
    assert.ok(after.choices[0].message.content.length > 0);
  });

  await check('openai: tools, streaming', async () => {
    const stream = await oa.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weather], stream: true,
    });
    let name = '', args = '', finish = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        for (const tc of c.delta.tool_calls ?? []) {
          name += tc.function?.name ?? '';
          args += tc.function?.arguments ?? '';
        }
        finish = c.finish_reason ?? finish;
      }
    }
    assert.equal(name, 'weather');
    assert.deepEqual(JSON.parse(args), { city: 'Paris' });
    assert.equal(finish, 'tool_calls');
  });
}

await check('openai: completions, not streaming and streaming', async () => {
  const r = await oa.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 4 });
  assert.equal(r.object, 'text_completion');
  assert.ok(r.choices[0].text.length > 0);
  let text = '';
  for await (const c of await oa.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 4, stream: true })) {
    text += c.choices[0]?.text ?? '';
  }
  assert.ok(text.length > 0);
});

await check('openai: errors carry status, type and code', async () => {
  await assert.rejects(oa.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }), (err) => {
    assert.ok(err instanceof OpenAI.NotFoundError, `${err}`);
    assert.equal(err.code, 'model_not_found');
    assert.equal(err.type, 'invalid_request_error');
    assert.match(err.message, /no-such-model/);
    return true;
  });
  const bad = new OpenAI({ baseURL: `${GATEWAY}/v1`, apiKey: 'llmk_wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (err) => err instanceof OpenAI.AuthenticationError && err.type === 'authentication_error');
});

if (EMBED) {
  await check('openai: embeddings (the SDK asks for base64 and decodes it)', async () => {
    const r = await oa.embeddings.create({ model: MODEL, input: ['hello', 'mesh'] });
    assert.equal(r.data.length, 2);
    assert.ok(r.data[0].embedding.length > 0);
    assert.ok(r.data[0].embedding.every((x) => Number.isFinite(x) && Math.abs(x) <= 1));
    const floats = await oa.embeddings.create({ model: MODEL, input: 'hello', encoding_format: 'float' });
    assert.ok(Math.abs(floats.data[0].embedding[0] - r.data[0].embedding[0]) < 1e-6, 'base64 and float agree');
  });
}

// --- ollama ---------------------------------------------------------------------------
const ol = new Ollama({ host: GATEWAY, headers: { Authorization: `Bearer ${TOKEN}` } });

await check('ollama: list, ps, show, version', async () => {
  const { models } = await ol.list();
  const m = models.find((x) => x.name === MODEL);
  assert.ok(m, `list: ${models.map((x) => x.name)}`);
  assert.ok(m.size > 0);
  assert.ok(m.details.family, 'details.family');
  const ps = await ol.ps();
  const running = ps.models.find((x) => x.name === MODEL);
  assert.ok(running.expires_at instanceof Date || !Number.isNaN(Date.parse(running.expires_at)), `expires_at ${running.expires_at}`);
  assert.ok(running.details.family);
  const show = await ol.show({ model: MODEL });
  assert.ok(show.capabilities.includes('completion'));
  const { version } = await ol.version();
  assert.match(version, /^\d+\.\d+\.\d+/);
  assert.notEqual(version, 'dev');
});

await check('ollama: chat, not streaming and streaming', async () => {
  const r = await ol.chat({ model: MODEL, messages: [{ role: 'user', content: 'Hello, mesh.' }], options: { num_predict: 8 } });
  assert.ok(r.done);
  assert.ok(r.message.content.length > 0);
  let text = '', done = false;
  for await (const part of await ol.chat({ model: MODEL, messages: [{ role: 'user', content: 'Hello' }], stream: true, options: { num_predict: 8 } })) {
    text += part.message.content;
    done = done || part.done;
  }
  assert.ok(done && text.length > 0);
  const g = await ol.generate({ model: `${MODEL}`, prompt: 'Why is the sky blue?', options: { num_predict: 4 } });
  assert.ok(g.response.length > 0);
});

if (TOOLS) {
  await check('ollama: tools, not streaming and streaming', async () => {
    const r = await ol.chat({ model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weather] });
    const call = r.message.tool_calls[0];
    assert.equal(call.function.name, 'weather');
    assert.deepEqual(call.function.arguments, { city: 'Paris' });
    let calls = [];
    for await (const part of await ol.chat({ model: MODEL, messages: [{ role: 'user', content: 'Weather?' }], tools: [weather], stream: true })) {
      calls = calls.concat(part.message.tool_calls ?? []);
    }
    assert.equal(calls.length, 1);
    assert.deepEqual(calls[0].function.arguments, { city: 'Paris' });
  });
}

if (EMBED) {
  await check('ollama: embed', async () => {
    const r = await ol.embed({ model: MODEL, input: ['hello', 'mesh'] });
    assert.equal(r.embeddings.length, 2);
    assert.ok(r.embeddings[1].length > 0);
  });
}

await check('ollama: errors are strings, not [object Object]', async () => {
  await assert.rejects(ol.chat({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }), (err) => {
    assert.equal(err.status_code, 404);
    assert.equal(typeof err.error, 'string');
    assert.match(err.message, /no-such-model/);
    assert.doesNotMatch(err.message, /object Object/);
    return true;
  });
  const bad = new Ollama({ host: GATEWAY, headers: { Authorization: 'Bearer llmk_wrong' } });
  await assert.rejects(bad.list(), (err) => err.status_code === 401 && /token refused/.test(err.message));
});

// --- @anthropic-ai/sdk: /v1/messages, the key in x-api-key ---------------------------------
const an = new Anthropic({ baseURL: GATEWAY, apiKey: TOKEN, maxRetries: 0 });

await check('anthropic: messages, not streaming', async () => {
  const r = await an.messages.create({ model: MODEL, max_tokens: 8, system: 'Be brief.', messages: [{ role: 'user', content: 'Hello, mesh.' }] });
  assert.equal(r.type, 'message');
  assert.equal(r.role, 'assistant');
  assert.equal(r.content[0].type, 'text');
  assert.ok(r.content[0].text.length > 0);
  assert.ok(['end_turn', 'max_tokens'].includes(r.stop_reason), `stop_reason ${r.stop_reason}`);
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, JSON.stringify(r.usage));
});

await check('anthropic: messages, streaming (the SDK assembles the events)', async () => {
  const stream = an.messages.stream({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'Hello, mesh.' }] });
  let text = '';
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.ok(text.length > 0);
  assert.equal(final.content[0].text, text);
  assert.ok(['end_turn', 'max_tokens'].includes(final.stop_reason), `stop_reason ${final.stop_reason}`);
  assert.ok(final.usage.output_tokens > 0);
});

await check('anthropic: stop_sequences end the answer and are named', async () => {
  // Greedy: an engine answers the same prompt the same way each time (the simulators always do).
  const ask = { model: MODEL, max_tokens: 16, temperature: 0, messages: [{ role: 'user', content: 'Hello, mesh.' }] };
  const full = (await an.messages.create(ask)).content[0].text;
  const chars = Array.from(full); // by code point: a sequence never splits one
  assert.ok(chars.length > 8, `an answer to stop in: ${JSON.stringify(full)}`);
  const seq = chars.slice(4, 8).join('');
  const want = full.slice(0, full.indexOf(seq));
  const r = await an.messages.create({ ...ask, stop_sequences: [seq] });
  assert.equal(r.stop_reason, 'stop_sequence');
  assert.equal(r.stop_sequence, seq);
  assert.equal(r.content[0].text, want);
  const final = await an.messages.stream({ ...ask, stop_sequences: [seq] }).finalMessage();
  assert.equal(final.stop_reason, 'stop_sequence');
  assert.equal(final.stop_sequence, seq);
  assert.equal(final.content[0].text, want);
});

if (TOOLS) {
  const weatherTool = { name: 'weather', description: weather.function.description, input_schema: weather.function.parameters };
  await check('anthropic: tools, not streaming, then the result', async () => {
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const r = await an.messages.create({ model: MODEL, max_tokens: 64, messages, tools: [weatherTool] });
    assert.equal(r.stop_reason, 'tool_use');
    const use = r.content.find((b) => b.type === 'tool_use');
    assert.equal(use.name, 'weather');
    assert.deepEqual(use.input, { city: 'Paris' });
    messages.push({ role: 'assistant', content: r.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny' }] });
    const after = await an.messages.create({ model: MODEL, max_tokens: 8, messages, tools: [weatherTool] });
    assert.notEqual(after.stop_reason, 'tool_use');
    assert.ok(after.content[0].text.length > 0);
  });

  await check('anthropic: tools, streaming', async () => {
    const stream = an.messages.stream({ model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weatherTool] });
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    const use = final.content.find((b) => b.type === 'tool_use');
    assert.equal(use.name, 'weather');
    assert.deepEqual(use.input, { city: 'Paris' });
  });
}

await check('anthropic: errors carry status and type', async () => {
  await assert.rejects(an.messages.create({ model: 'no-such-model', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }), (err) => {
    assert.ok(err instanceof Anthropic.NotFoundError, `${err}`);
    assert.equal(err.error.type, 'error');
    assert.equal(err.error.error.type, 'not_found_error');
    assert.match(err.message, /no-such-model/);
    return true;
  });
  const bad = new Anthropic({ baseURL: GATEWAY, apiKey: 'llmk_wrong', maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
    (err) => err instanceof Anthropic.AuthenticationError && err.error.error.type === 'authentication_error');
});

// --- ai + @ai-sdk/openai: openai(model) speaks /v1/responses ------------------------------
if (process.env.RESPONSES === '1') {
  const provider = createOpenAI({ baseURL: `${GATEWAY}/v1`, apiKey: TOKEN });

  await check('ai: generateText and streamText through /v1/responses', async () => {
    const r = await generateText({ model: provider(MODEL), prompt: 'Hello, mesh.', maxOutputTokens: 8, maxRetries: 0 });
    assert.ok(r.text.length > 0);
    assert.ok(r.usage.outputTokens > 0);
    const s = streamText({ model: provider(MODEL), prompt: 'Hello, mesh.', maxOutputTokens: 8, maxRetries: 0, onError: ({ error }) => { throw error; } });
    let text = '';
    for await (const part of s.textStream) text += part;
    assert.ok(text.length > 0);
    assert.ok(['stop', 'length'].includes(await s.finishReason), `finish ${await s.finishReason}`);
  });

  await check('ai: a conversation goes on (earlier answers come back as item references)', async () => {
    const first = await generateText({ model: provider(MODEL), prompt: 'Hello, mesh.', maxOutputTokens: 8, maxRetries: 0 });
    const messages = [{ role: 'user', content: 'Hello, mesh.' }, ...first.response.messages, { role: 'user', content: 'And then?' }];
    const second = await generateText({ model: provider(MODEL), messages, maxOutputTokens: 8, maxRetries: 0 });
    assert.ok(second.text.length > 0);
  });

  if (TOOLS) {
    await check('ai: a function tool through /v1/responses, executed and answered', async () => {
      let asked = null;
      const r = await generateText({
        model: provider(MODEL), prompt: 'What is the weather in Paris?', maxRetries: 0, stopWhen: stepCountIs(2),
        tools: {
          weather: tool({
            description: 'the weather in a city',
            inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string', enum: ['Paris'] } }, required: ['city'] }),
            execute: async (input) => { asked = input; return { forecast: 'sunny' }; },
          }),
        },
      });
      assert.deepEqual(asked, { city: 'Paris' });
      assert.equal(r.steps.length, 2);
      assert.ok(r.text.length > 0);
    });

    await check('ai: a function tool, streaming', async () => {
      const s = streamText({
        model: provider(MODEL), prompt: 'Weather in Paris?', maxRetries: 0, stopWhen: stepCountIs(1),
        onError: ({ error }) => { throw error; },
        tools: { weather: tool({ inputSchema: jsonSchema(weather.function.parameters) }) },
      });
      const calls = await s.toolCalls;
      assert.equal(calls.length, 1);
      assert.equal(calls[0].toolName, 'weather');
      assert.deepEqual(calls[0].input, { city: 'Paris' });
    });
  }
}
