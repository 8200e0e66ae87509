// Bob, through the JS SDK, tries alice's thread and memory; prints what each attempt got.
// Usage: node bob_tries_alice.mjs URL THREAD_ID  (prints one JSON object)
import { Client } from "@langchain/langgraph-sdk";

const [url, threadId] = process.argv.slice(2);
const bob = new Client({ apiUrl: url, defaultHeaders: { Authorization: "Bearer bob-token" } });
const anonymous = new Client({ apiUrl: url });

async function status(call) {
  try {
    await call();
    return 200;
  } catch (error) {
    return error?.status ?? error?.response?.status ?? String(error);
  }
}

const found = await bob.threads.search({ limit: 100 });
const result = {
  getState: await status(() => bob.threads.getState(threadId)),
  searchListsIt: found.some((thread) => thread.thread_id === threadId),
  memory: await status(() => bob.store.searchItems(["memory", "alice"])),
  runAsAlice: await status(() =>
    bob.runs.wait(null, "ctxgraph", {
      input: { messages: [{ role: "user", content: "What do you remember about me?" }] },
      context: { user_id: "alice" },
    }),
  ),
  anonymous: await status(() => anonymous.threads.search({ limit: 1 })),
};
console.log(JSON.stringify(result));
