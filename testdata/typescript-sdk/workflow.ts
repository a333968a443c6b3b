// workflow.ts writes workflow.db with the TypeScript SDK's workflow layer
// (@alineo-labs/workflow, @alineo-labs/sandbox, @alineo-labs/sqlite) against
// the OpenSandbox server at OPEN_SANDBOX_URL. Run it under bun with
// regenerate-workflow.sh, which says what it needs; ../README.md says what
// the file must hold.
//
//   bun workflow.ts OUT_DIR
//
// The workflow layer runs the stages (workflow(client).sandbox(...)) and the
// sandbox layer records them (sandbox_created, exec_start, exec_event,
// exec_complete, checkpoint_created, sandbox_closed). The events that
// LedgerEvent declares for the workflow layer (run_started, step_start,
// step_complete, step_failed, step_rolled_back, workflow_complete,
// workflow_failed, checkpoint, snapshot) are not written by
// @alineo-labs/workflow 0.1.1 itself; this script writes them where their doc
// comments say, with the SDK's own calls: the handle's emit(event,
// stepIndex, payload), in order with its other events, and, for the events
// that carry an error, the adapter's append(entry).
import { LedgerEvent, Sandbox, type SandboxHandle, type SandboxOptions } from "@alineo-labs/sandbox";
import { SQLiteAdapter } from "@alineo-labs/sqlite";
import { workflow } from "@alineo-labs/workflow";

const out = process.argv[2];
if (!out) throw new Error("usage: bun workflow.ts OUT_DIR");
const baseUrl = process.env.OPEN_SANDBOX_URL ?? "http://127.0.0.1:8080";
const apiKey = process.env.OPEN_SANDBOX_API_KEY ?? "";
const image = process.env.FIXTURE_IMAGE ?? "ubuntu:22.04";
const resources = { cpu: "500m", memory: "512Mi" };
const adapter = new SQLiteAdapter(`${out}/workflow.db`);

// The last handle the workflow layer created, and what it ran.
let current: SandboxHandle | undefined;
let failed: { step: number; error: string } | undefined;

// WorkflowClient is the Sandbox client the workflow layer is given: each
// handle it creates records the workflow layer's events around its steps.
class WorkflowClient extends Sandbox {
  override async sandbox(opts: SandboxOptions): Promise<SandboxHandle> {
    const sb = await super.sandbox(opts);
    current = sb;
    await sb.emit(LedgerEvent.RunStarted, -1, { workflow: opts.name, image: opts.image });
    instrument(sb);
    return sb;
  }
}

// instrument records step_start before each exec (its step index is the
// exec's own, 1, 2, 3...), step_complete and a checkpoint (the workflow's
// durable resumption point) after it, step_failed when it throws, and a
// snapshot after each sb.checkpoint().
function instrument(sb: SandboxHandle): void {
  const exec = sb.exec.bind(sb);
  const checkpoint = sb.checkpoint.bind(sb);
  let step = 0;
  sb.exec = ((cmd: string, opts?: object) => {
    const n = ++step;
    void sb.emit(LedgerEvent.StepStart, n, { step: n, op: "exec", cmd });
    return (async () => {
      try {
        const r = await exec(cmd, opts as never);
        await sb.emit(LedgerEvent.StepComplete, n, { step: n, exitCode: r.exitCode, stdout: r.stdout });
        await sb.emit(LedgerEvent.Checkpoint, n, { step: n, vars: {} });
        return r;
      } catch (err) {
        const error = err instanceof Error ? err.message : String(err);
        failed = { step: n, error };
        await adapter.append({
          ts: Date.now(), name: sb.name, sandboxId: sb.sandboxId, stepIndex: n,
          event: LedgerEvent.StepFailed, payload: { step: n, cmd, exitCode: (err as { exitCode?: number }).exitCode },
          error,
        });
        throw err;
      }
    })();
  }) as unknown as typeof sb.exec;
  sb.checkpoint = (async (name?: string) => {
    const snapshotId = await checkpoint(name);
    await sb.emit(LedgerEvent.Snapshot, -1, { snapshotId, name, afterStep: step });
    return snapshotId;
  }) as typeof sb.checkpoint;
}

const client = new WorkflowClient({ baseUrl, apiKey, adapter });

// ts-workflow: three steps, a checkpoint wf1 after the second, completed.
const ok = await workflow(client)
  .sandbox({ image, resources, name: "ts-workflow" }, (sb) => {
    sb.exec("echo build > /tmp/out.txt; cat /tmp/out.txt");
    sb.exec("printf 'a\\nb\\n'; echo warn >&2");
    sb.checkpoint("wf1");
    sb.exec("cat /proc/sys/kernel/random/uuid");
  })
  .result();
await current!.emit(LedgerEvent.WorkflowComplete, -1, { stdout: ok.stdout });

// ts-workflow-failed: its second step exits 3; the first is rolled back.
failed = undefined;
try {
  await workflow(client)
    .sandbox({ image, resources, name: "ts-workflow-failed" }, (sb) => {
      sb.exec("echo one");
      sb.exec("exit 3");
    })
    .result();
  throw new Error("the failing workflow did not fail");
} catch (err) {
  if (!failed) throw err;
}
const sb = current!;
await sb.emit(LedgerEvent.StepRolledBack, 1, { step: 1 });
await adapter.append({
  ts: Date.now(), name: sb.name, sandboxId: sb.sandboxId, stepIndex: -1,
  event: LedgerEvent.WorkflowFailed, payload: { failedStep: failed.step }, error: failed.error,
});
