// A webhook bridge for wf-initiation in TypeScript (docs/wire.md): reads deliveries as JSON lines on
// stdin, sends each to the activation by update (`deliver`, answered with the durable disposition)
// or by signal (`deliver_signal`, then the `delivery` query), and prints one JSON line per delivery:
//   {"delivery_id", "via", "disposition", "outcome": "taken" | "retried" | "refused", "message"?}
//
//   node dist/bridge.js --address 127.0.0.1:7233 --workflow orders [--namespace default] [--key HEX]
//
// --key plugs in the team's AES-256-GCM codec (src/codec.ts); without it payloads are plain JSON.
import { randomUUID } from "node:crypto";
import * as readline from "node:readline";
import { Client, Connection, WorkflowHandle, WorkflowUpdateFailedError } from "@temporalio/client";
import { ApplicationFailure } from "@temporalio/common";
import { AesGcmCodec } from "./codec";

interface Line {
  via: "update" | "signal";
  entry?: string;
  payload: { delivery_id?: string; [key: string]: unknown };
}

interface DeliveryResult {
  disposition: string;
  delivery_id: string | null;
  message?: string | null;
}

const RETRIED_TYPES = new Set(["Rebinding", "Misrouted", "ConsultParent"]); // send the same delivery again
const ATTEMPTS = 8;

function option(name: string, fallback?: string): string {
  const at = process.argv.indexOf(`--${name}`);
  const value = at >= 0 ? process.argv[at + 1] : fallback;
  if (value === undefined) throw new Error(`--${name} is required`);
  return value;
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function failureType(err: unknown): string | undefined {
  const cause = err instanceof WorkflowUpdateFailedError ? err.cause : err;
  return cause instanceof ApplicationFailure ? (cause.type ?? undefined) : undefined;
}

async function byUpdate(handle: WorkflowHandle, line: Line): Promise<Record<string, unknown>> {
  const updateId = `bridge-${randomUUID()}`; // the same id on every attempt: a retried update is applied once
  for (let attempt = 1; ; attempt++) {
    try {
      const result = await handle.executeUpdate<DeliveryResult, [Line["payload"] | object]>("deliver", {
        args: [{ entry: line.entry, payload: line.payload }],
        updateId,
      });
      if (result.disposition === "deferred" && attempt < ATTEMPTS) {
        await pause(250 * 2 ** attempt); // the activation is at a limit: nothing was consumed
        continue;
      }
      return { disposition: result.disposition, outcome: outcomeOf(result.disposition), message: result.message ?? undefined };
    } catch (err) {
      const type = failureType(err);
      if (type && RETRIED_TYPES.has(type) && attempt < ATTEMPTS) {
        await pause(250 * 2 ** attempt);
        continue;
      }
      return { disposition: null, outcome: "refused", message: `${type ?? "error"}: ${(err as Error).message}` };
    }
  }
}

async function bySignal(handle: WorkflowHandle, line: Line): Promise<Record<string, unknown>> {
  await handle.signal("deliver_signal", { entry: line.entry, payload: line.payload });
  // Durable now; the disposition is decided from the history and read with the `delivery` query.
  const entry = line.entry;
  if (!entry) return { disposition: null, outcome: "refused", message: "a signalled delivery needs its entry to be read back" };
  for (let waited = 0; waited < 60_000; waited += 250) {
    const record = await handle.query<DeliveryResult | null, [string, string]>("delivery", entry, String(line.payload.delivery_id));
    if (record) return { disposition: record.disposition, outcome: outcomeOf(record.disposition) };
    await pause(250);
  }
  return { disposition: null, outcome: "refused", message: "no disposition after 60 s" };
}

function outcomeOf(disposition: string): string {
  // duplicate: taken before (a redelivery); conflict and invalid: recorded by the activation, the
  // sender must fix the event; deferred after every attempt: deliver it again later.
  if (disposition === "conflict" || disposition === "invalid") return "refused";
  if (disposition === "deferred") return "retried";
  return "taken";
}

async function main(): Promise<void> {
  const key = process.argv.includes("--key") ? Buffer.from(option("key"), "hex") : undefined;
  const connection = await Connection.connect({ address: option("address", "127.0.0.1:7233") });
  const client = new Client({
    connection,
    namespace: option("namespace", "default"),
    dataConverter: key ? { payloadCodecs: [new AesGcmCodec(key)] } : undefined,
  });
  const handle = client.workflow.getHandle(`wfi-activation:${option("workflow")}`);
  const input = readline.createInterface({ input: process.stdin });
  for await (const text of input) {
    if (!text.trim()) continue;
    const line = JSON.parse(text) as Line;
    const answer = line.via === "signal" ? await bySignal(handle, line) : await byUpdate(handle, line);
    process.stdout.write(JSON.stringify({ delivery_id: line.payload.delivery_id ?? null, via: line.via, ...answer }) + "\n");
  }
  await connection.close();
}

main().catch((err) => {
  process.stderr.write(`bridge: ${(err as Error).message}\n`);
  process.exit(1);
});
