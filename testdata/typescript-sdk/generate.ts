// generate.ts writes session.db and extras.db with the TypeScript SDK itself
// (@alineo-labs/sandbox and @alineo-labs/sqlite), against the OpenSandbox
// server at OPEN_SANDBOX_URL. Run it under bun with regenerate.sh, which says
// what it needs; ../README.md says what each file must hold.
//
//   bun generate.ts OUT_DIR
import { Sandbox } from "@alineo-labs/sandbox";
import { SQLiteAdapter } from "@alineo-labs/sqlite";

const out = process.argv[2];
if (!out) throw new Error("usage: bun generate.ts OUT_DIR");
const baseUrl = process.env.OPEN_SANDBOX_URL ?? "http://127.0.0.1:8080";
const apiKey = process.env.OPEN_SANDBOX_API_KEY ?? "";
// The image of every sandbox: it needs sh, base64, cat, wc and ls (python3 is
// optional: the extras' exec 7 starts it in the background and exits 0 either way).
const image = process.env.FIXTURE_IMAGE ?? "ubuntu:22.04";
const resources = { cpu: "500m", memory: "512Mi" };

function client(file: string): Sandbox {
  return new Sandbox({ baseUrl, apiKey, adapter: new SQLiteAdapter(`${out}/${file}`) });
}

// session.db: a run of 8 execs with a checkpoint t1 after the 7th, closed,
// then the SDK's own resume of it, whose execs 1-7 replay and 8 runs live.
async function session(): Promise<void> {
  const c = client("session.db");
  const sb = await c.sandbox({ image, resources, name: "ts-run" });
  const first = sb.sandboxId;
  await sb.exec("cat /proc/sys/kernel/random/uuid");
  await sb.exec("printf 'a\\nb\\n'; echo err >&2");
  await sb.exec("for i in 1 2 3; do echo $i; done");
  await sb.exec("echo out; echo oops >&2");
  await sb.exec("exit 3").then(
    () => { throw new Error("exit 3 did not fail under strict"); },
    (err) => { if (err?.exitCode !== 3) throw err; },
  );
  await sb.exec("echo x >> /tmp/count; wc -l < /tmp/count; exit 4", { strict: false });
  // File operations write nothing to the ledger; exec 7 shows their result.
  await sb.writeFile("/tmp/f1.txt", "hello file\nline2\n");
  await sb.replaceInFiles([{ path: "/tmp/f1.txt", old: "line2", new: "LINE2" }]);
  await sb.moveFile("/tmp/f1.txt", "/tmp/f2.txt");
  await sb.exec("ls /tmp; cat /tmp/f2.txt");
  await sb.checkpoint("t1");
  await sb.exec("cat /proc/sys/kernel/random/uuid");
  await sb.close();

  const re = await c.resume(first);
  const cmds = [
    "cat /proc/sys/kernel/random/uuid",
    "printf 'a\\nb\\n'; echo err >&2",
    "for i in 1 2 3; do echo $i; done",
    "echo out; echo oops >&2",
    "exit 3",
    "echo x >> /tmp/count; wc -l < /tmp/count; exit 4",
    "ls /tmp; cat /tmp/f2.txt",
  ];
  for (const cmd of cmds) await re.exec(cmd, { strict: false }); // replayed: nothing written
  await re.exec("cat /proc/sys/kernel/random/uuid"); // step 8, live
  await re.close();
}

// extras.db: pause and resume, execCode, a bash session, a PTY, a tagged
// checkpoint through a fork, an untagged one, a connect() handle, a restore,
// an environment built once and spawned twice.
async function extras(): Promise<void> {
  const c = client("extras.db");
  const sb = await c.sandbox({ image, resources, name: "ts-extras" });
  await sb.pause();
  await sb.resume();
  await sb.exec("echo alive");
  await sb.execCode("echo code");
  await sb.execCode("print(1+1)"); // sandboxd's /code without a language runs bash: exit 2
  const session = await sb.createSession();
  await session.exec("cd /usr");
  await session.exec("pwd");
  await session.close();
  const pty = sb.exec("sh", { interactive: true });
  await pty.write("echo ptyok\n");
  await pty.write("exit\n");
  await sb.exec("cd /tmp && nohup python3 -m http.server 8088 >/dev/null 2>&1 &");
  const fork = await sb.fork("f1");
  await fork.close();
  const snap = await sb.checkpoint();
  const connected = await c.connect(sb.sandboxId, "ts-extras-connected");
  await connected.exec("echo via-connect");
  const restored = await c.restoreSnapshot(snap, "ts-restored", resources);
  await restored.close();
  await sb.close();

  const env = c.environment("tsenv", {
    image,
    resources,
    setup: async (b) => {
      await b.exec("echo built > /tmp/env.txt");
    },
  });
  for (let i = 0; i < 2; i++) {
    const s = await env.sandbox();
    await s.close();
  }
}

await session();
await extras();
