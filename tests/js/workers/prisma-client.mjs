// A generated Prisma 7 client for the tests, as a user's project makes one:
// a schema with one model, `prisma generate` (the prisma-client-js
// generator, whose output is JavaScript Node 20 loads), the client imported
// from the output. Generated under node_modules (ignored, and where the
// output finds @prisma/client), once per provider and table, and removed
// when the process that generated it exits (each is 8 MB).

import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const project = fileURLToPath(new URL('..', import.meta.url));
const require = createRequire(import.meta.url);

/** The schema of the host's shipments (the columns of host-tables.mjs) in table `table`. */
const schemaOf = (provider, table) => `
generator client {
  provider = "prisma-client-js"
  output   = "./client"
}

datasource db {
  provider = "${provider}"
}

model Shipment {
  id      Int    @id @default(autoincrement())
  eventId String @unique @map("event_id")
  orderId String @map("order_id")

  @@map("${table}")
}
`;

/** The PrismaClient class generated for `provider` ('postgresql', 'sqlite') over the shipments table `table`. */
export function prismaClientFor(provider, table) {
  return require(prismaClientDir(provider, table)).PrismaClient;
}

/** The directory of that client (for another process to require). */
export function prismaClientDir(provider, table) {
  return generatedDir(schemaOf(provider, table), `${provider}-${table}`);
}

/** The PrismaClient class generated from the schema text `schema` (its generator's output made ./client), under `name`. */
export function generated(schema, name) {
  return require(generatedDir(schema, name)).PrismaClient;
}

function generatedDir(schema, name) {
  const dir = join(project, 'node_modules', '.idemflow-prisma', name);
  if (!existsSync(join(dir, 'client', 'index.js'))) {
    mkdirSync(dir, { recursive: true });
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'schema.prisma'), schema.replace(/^(\s*output\s*=\s*)"[^"]*"/m, '$1"./client"'));
    const run = spawnSync(
      process.execPath,
      [join(project, 'node_modules', 'prisma', 'build', 'index.js'), 'generate', '--schema', join(dir, 'schema.prisma')],
      {
        cwd: dir,
        encoding: 'utf8',
        // generate needs no schema engine, but the CLI fetches one on start unless it is told where one is;
        // the machines that run these tests reach no address but the package registry.
        env: {
          ...process.env,
          PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? process.execPath,
          PRISMA_HIDE_UPDATE_MESSAGE: '1',
        },
        timeout: 120_000,
      },
    );
    if (run.status !== 0) throw new Error(`prisma generate failed (${run.status ?? run.signal}): ${run.stderr}${run.stdout}`);
  }
  return join(dir, 'client');
}
