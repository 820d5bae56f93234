// Asks the API through the official openai npm client, as a Node chat bot would: the models, one whole answer,
// one streamed answer (text, the early trace id and the last chunk's `rag`), and one error. The test passes its
// settings as JSON on argv and reads one JSON object from stdout (tests/ui/api/test_clients.py).
import OpenAI from "openai";

const { baseURL, apiKey, model, messages } = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });

const models = (await client.models.list()).data.map((m) => m.id);

const whole = await client.chat.completions.create({ model, messages });

const stream = await client.chat.completions.create({ model, messages, stream: true });
let text = "";
let earlyTraceId = null;
let rag = null;
let finish = null;
for await (const chunk of stream) {
  const choice = chunk.choices[0];
  if (choice?.delta?.content) text += choice.delta.content;
  if (choice?.finish_reason) finish = choice.finish_reason;
  if (chunk.rag?.trace_id && earlyTraceId === null) earlyTraceId = chunk.rag.trace_id;
  if (chunk.rag?.sources) rag = chunk.rag;
}

let error = null;
try {
  await client.chat.completions.create({ model: "no-such-model", messages });
} catch (err) {
  error = { status: err.status, type: err.error?.type ?? err.type, code: err.code ?? err.error?.code, name: err.constructor.name };
}

console.log(
  JSON.stringify({
    models,
    whole: { content: whole.choices[0].message.content, rag: whole.rag, id: whole.id },
    streamed: { content: text, earlyTraceId, rag, finish },
    error,
  }),
);
