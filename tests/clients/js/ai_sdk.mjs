// The Vercel AI SDK against the gateway, one scenario per run; prints one JSON object.
// Run by tests/clients/test_ai_sdk.py:  node ai_sdk.mjs SCENARIO BASE_URL MODEL
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const [scenario, baseURL, model] = process.argv.slice(2);
const apiKey = "unused";
const compatible = createOpenAICompatible({ name: "gateway", baseURL: `${baseURL}/v1`, apiKey });
const openai = createOpenAI({ baseURL: `${baseURL}/v1`, apiKey });
const anthropic = createAnthropic({ baseURL: `${baseURL}/v1`, apiKey });

const weather = tool({
  description: "The weather in a city",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => ({ city, sky: "sunny" }),
});

const scenarios = {
  // generateText and streamText on chat completions (openai-compatible provider).
  async chat() {
    const plain = await generateText({ model: compatible(model), prompt: "Say hello." });
    const stream = streamText({ model: compatible(model), prompt: "Say hello." });
    let streamed = "";
    for await (const delta of stream.textStream) streamed += delta;
    return { text: plain.text, streamed, usage: plain.usage };
  },
  // Anthropic's provider on /v1/messages, plain and streamed.
  async anthropic() {
    const plain = await generateText({ model: anthropic(model), prompt: "Say hello." });
    const stream = streamText({ model: anthropic(model), prompt: "Say hello." });
    let streamed = "";
    for await (const delta of stream.textStream) streamed += delta;
    return { text: plain.text, streamed };
  },
  // A tool loop: the model calls get_weather, the SDK runs it and asks again.
  async tools() {
    const provider = { compatible, anthropic, responses: openai }[process.argv[5] ?? "compatible"];
    const result = await generateText({
      model: provider(model),
      prompt: "What is the weather in Paris?",
      tools: { get_weather: weather },
      stopWhen: stepCountIs(3),
    });
    return {
      text: result.text,
      steps: result.steps.length,
      calls: result.steps.flatMap((s) => s.toolCalls.map((c) => [c.toolName, c.input])),
      results: result.steps.flatMap((s) => s.toolResults.map((r) => r.output)),
    };
  },
  // A two-turn conversation on the Responses API with store on (the provider's default):
  // the second turn sends the first answer back as item_reference items; a third continues
  // with previous_response_id.
  async responses() {
    const transcript = [];
    const messages = [{ role: "user", content: "What is the capital of France?" }];
    const first = await generateText({ model: openai(model), messages });
    transcript.push(["user", messages[0].content], ["assistant", first.text]);
    messages.push(...first.response.messages);
    messages.push({ role: "user", content: "And the capital of Germany?" });
    const second = await generateText({ model: openai(model), messages });
    transcript.push(["user", messages.at(-1).content], ["assistant", second.text]);
    const third = await generateText({
      model: openai(model),
      prompt: "And the capital of Italy?",
      providerOptions: { openai: { previousResponseId: second.providerMetadata.openai.responseId } },
    });
    transcript.push(["user", "And the capital of Italy?"], ["assistant", third.text]);
    return {
      transcript,
      ids: [first, second, third].map((r) => r.providerMetadata.openai.responseId),
      inputTokens: [first, second, third].map((r) => r.usage.inputTokens),
    };
  },
  // Reasoning on the Responses API: the provider reads only a reasoning item's `summary`,
  // which OpenAI (and the gateway) fill only when the request sets `reasoning.summary`;
  // it sends that for model ids it does not know as reasoning models only with
  // forceReasoning. Plain and streamed, each with and without the summary asked for,
  // then a second turn that sends the first turn's reasoning back.
  async reasoning() {
    const asked = { openai: { forceReasoning: true, reasoningSummary: "auto" } };
    const prompt = "What is the capital of France?";
    const plain = await generateText({ model: openai(model), prompt });
    const summarised = await generateText({ model: openai(model), prompt, providerOptions: asked });
    const stream = streamText({ model: openai(model), prompt, providerOptions: asked });
    let streamed = "";
    for await (const part of stream.fullStream) {
      if (part.type === "reasoning-delta") streamed += part.text;
    }
    const messages = [{ role: "user", content: prompt }, ...summarised.response.messages];
    messages.push({ role: "user", content: "And the capital of Germany?" });
    const second = await generateText({ model: openai(model), messages, providerOptions: asked });
    return {
      plain: { text: plain.text, reasoningText: plain.reasoningText ?? "" },
      summarised: { text: summarised.text, reasoningText: summarised.reasoningText ?? "" },
      streamed: { text: await stream.text, reasoningText: streamed },
      second: { text: second.text, reasoningText: second.reasoningText ?? "" },
      sentBack: summarised.response.messages[0].content.map((part) => part.type),
    };
  },
};

const result = await scenarios[scenario]();
process.stdout.write(JSON.stringify(result) + "\n");
