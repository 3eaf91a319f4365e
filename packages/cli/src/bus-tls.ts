// TLS between the mesh's bus servers and their clients: a CA the mesh makes once and keeps (its key
// 0600, in the directory the operator names), and a certificate per server signed by it. Node
// cannot sign certificates, so Debian's `openssl` does, always run with an argument list (never a
// shell string), in a private temporary directory.
import { execFile } from "node:child_process";
import { isIP } from "node:net";
import { chmod, copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { readFileIfExists, writeFileAtomic } from "@mesh/bus";

/** The CA's certificate and key in the TLS directory. */
export const CA_CERT = "ca.pem";
const CA_KEY = "ca-key.pem";

/** openssl is missing, or refused to make a key or certificate. */
export class BusTlsError extends Error {
  override name = "BusTlsError";
  constructor(what: string, detail: string, options?: { cause?: unknown }) {
    super(
      `could not ${what} (${detail}): install Debian's openssl package, or check the TLS directory's permissions`,
      options,
    );
  }
}

/** What `ensureBusCa` found or made. */
export interface BusCa {
  readonly certFile: string;
  readonly keyFile: string;
  /** Whether it was made now (false: the one kept there before). */
  readonly made: boolean;
}

function openssl(args: readonly string[], what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile("openssl", [...args], { timeout: 30_000 }, (err, _stdout, stderr) => {
      if (err === null) return resolve();
      const detail =
        (err as NodeJS.ErrnoException).code === "ENOENT"
          ? "openssl not found on PATH"
          : (stderr.trim().split("\n")[0] ?? err.message);
      reject(new BusTlsError(what, detail, { cause: err }));
    });
  });
}

/**
 * The mesh's bus CA in `dir`: the one kept there, or a new one (EC P-256, ten years), its key 0600.
 * @throws BusTlsError when openssl is missing or fails.
 */
export async function ensureBusCa(dir: string): Promise<BusCa> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const certFile = join(dir, CA_CERT);
  const keyFile = join(dir, CA_KEY);
  const [cert, key] = await Promise.all([readFileIfExists(certFile), readFileIfExists(keyFile)]);
  if (cert !== undefined && key !== undefined) return { certFile, keyFile, made: false };
  const work = await mkdtemp(join(dir, ".new-ca-"));
  try {
    await openssl(
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        join(work, CA_KEY),
        "-out",
        join(work, CA_CERT),
        "-days",
        "3650",
        "-subj",
        "/CN=mesh bus CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
      ],
      "make the bus CA",
    );
    // The key first, so a kept certificate always has its key beside it.
    await writeFileAtomic(keyFile, await readFile(join(work, CA_KEY), "utf8"), 0o600);
    await writeFileAtomic(certFile, await readFile(join(work, CA_CERT), "utf8"), 0o644);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  return { certFile, keyFile, made: true };
}

/**
 * Writes into `outDir` a key (`server-key.pem`, 0600) and a certificate (`server.pem`) for a
 * server reached at `host`, signed by `ca`, for both ends of a connection (routes are clients of
 * each other), and a copy of the CA's certificate (`ca.pem`).
 * @throws BusTlsError when openssl fails.
 */
export async function issueServerCertificate(
  ca: BusCa,
  name: string,
  host: string,
  outDir: string,
): Promise<void> {
  await mkdir(outDir, { recursive: true, mode: 0o700 });
  const work = await mkdtemp(join(outDir, ".new-cert-"));
  try {
    const bare = host.startsWith("[") ? host.slice(1, -1) : host;
    // A client reaching a loopback server may name it localhost (nats.js does for gossiped URLs).
    const loopback = bare === "127.0.0.1" || bare === "::1" || bare === "localhost";
    const san = loopback
      ? "IP:127.0.0.1,IP:::1,DNS:localhost"
      : isIP(bare) !== 0
        ? `IP:${bare}`
        : `DNS:${bare}`;
    const ext = join(work, "ext.cnf");
    await writeFile(
      ext,
      [
        `subjectAltName=${san}`,
        "basicConstraints=CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage=serverAuth,clientAuth",
        "",
      ].join("\n"),
    );
    const key = join(work, "server-key.pem");
    const csr = join(work, "server.csr");
    const cert = join(work, "server.pem");
    await openssl(
      [
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        key,
        "-out",
        csr,
        "-subj",
        `/CN=${name}`,
      ],
      `make the key of bus server ${name}`,
    );
    await openssl(
      [
        "x509",
        "-req",
        "-in",
        csr,
        "-CA",
        ca.certFile,
        "-CAkey",
        ca.keyFile,
        "-set_serial",
        `0x${randomBytes(16).toString("hex")}`,
        "-days",
        "825",
        "-extfile",
        ext,
        "-out",
        cert,
      ],
      `sign the certificate of bus server ${name}`,
    );
    await writeFileAtomic(join(outDir, "server-key.pem"), await readFile(key, "utf8"), 0o600);
    await writeFileAtomic(join(outDir, "server.pem"), await readFile(cert, "utf8"), 0o644);
    await copyFile(ca.certFile, join(outDir, CA_CERT));
    await chmod(join(outDir, CA_CERT), 0o644);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
