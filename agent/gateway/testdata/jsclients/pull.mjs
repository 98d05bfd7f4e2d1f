// The official Ollama JS client pulls a model the mesh runs nowhere, streaming progress, then
// chats with it (e2e TestLANIntents). GATEWAY, TOKEN and MODEL come from the environment; it
// exits non-zero, saying why, on any failure.
import { Ollama } from 'ollama';

const { GATEWAY, TOKEN, MODEL } = process.env;
const ol = new Ollama({ host: GATEWAY, headers: { Authorization: `Bearer ${TOKEN}` } });
try {
  let last = '';
  for await (const p of await ol.pull({ model: MODEL, stream: true })) {
    last = p.status;
    console.log(`pull: ${p.status}${p.total ? ` ${p.completed ?? 0}/${p.total}` : ''}`);
  }
  if (last !== 'success') throw new Error(`the pull ended with "${last}", not success`);
  const res = await ol.chat({ model: MODEL, messages: [{ role: 'user', content: 'hello' }] });
  if (!res.message?.content) throw new Error('the chat answered nothing');
  console.log(`chat: ${res.message.content.slice(0, 60)}`);
} catch (e) {
  console.error(`FAIL: ${e?.message ?? e}`);
  process.exit(1);
}
