// A Skills server (extension io.modelcontextprotocol/skills, SEP-2640) built on the official
// TypeScript SDK's `ext/skills`, for Manifold's interop tests (test_skills.py) and the suite's
// skills scenarios (tests/conformance/run.sh). Two configurations share a skill name, so that
// a test sees the collision Manifold must tell apart:
//
//   alpha  pdf-processing (a file under references/deep/, a PNG), acme/brand-voice (a skill
//          path of two segments), code-review, git-commit, release-notes (SKILL.md alone):
//          pages of two
//   beta   pdf-processing (other files), csv-cleanup, data/sql-style
//
// Every skill but release-notes has a subdirectory, so the suite's directory scenario, which
// reads the directory of whichever skill is listed first, finds one to descend into.
//
// Every file is made here in memory, the same bytes on every run. Each configuration also has
// a tool, `whoami`, answering its name, so the catalogs have something beside the skills.
//
// Run: node skills_server.mjs CONFIG stdio
//      node skills_server.mjs CONFIG http [PORT]   (Streamable HTTP at /mcp, both eras; prints
//                                                   "listening on 127.0.0.1:PORT" to stderr)

import http from 'node:http';

import { McpServer, createMcpHandler } from '@modelcontextprotocol/server';
import { SkillsExtension, memorySkillFiles } from '@modelcontextprotocol/server/ext/skills';
import { serveStdio } from '@modelcontextprotocol/server/stdio';

/** A SKILL.md: YAML frontmatter (name, description and any extra lines) and a body. */
function skillMd(name, description, extra, body) {
    return `---\nname: ${name}\ndescription: ${description}\n${extra}---\n\n# ${name}\n\n${body}\n`;
}

/** A valid 1x1 PNG with fixed bytes (signature, IHDR, IDAT, IEND), and a trailing marker byte
 * per configuration so the two servers' images differ. */
function png(marker) {
    const hex =
        '89504e470d0a1a0a0000000d4948445200000001000000010806000000' +
        '1f15c4890000000d49444154789c6360f8cfc0f01f0005fe02fea7d6a4' +
        '3c0000000049454e44ae426082';
    return Uint8Array.from([...Buffer.from(hex, 'hex'), marker]);
}

const CONFIGS = {
    alpha: {
        'pdf-processing/SKILL.md': skillMd(
            'pdf-processing',
            'Extract text and tables from PDF files; fill PDF forms.',
            'license: Apache-2.0\nmetadata:\n  owner: alpha\n  version: "1.2"\n',
            'Read references/FORMS.md before filling a form.'
        ),
        'pdf-processing/references/FORMS.md': '# Forms\n\nFields are filled in page order.\n',
        'pdf-processing/references/deep/LAYOUT.md': '# Layout\n\nColumns are read left to right.\n',
        'pdf-processing/scripts/extract.py': 'import sys\nprint(open(sys.argv[1], "rb").read()[:4])\n',
        'pdf-processing/assets/logo.png': png(0x61),
        'acme/brand-voice/SKILL.md': skillMd(
            'brand-voice',
            'Write in the ACME brand voice.',
            '',
            'Short sentences. No exclamation marks.'
        ),
        'acme/brand-voice/examples/good.md': 'We ship on Tuesdays.\n',
        'code-review/SKILL.md': skillMd('code-review', 'Review a change for correctness first.', '', 'Read the tests.'),
        'code-review/checklists/SECURITY.md': '- Inputs are bounded.\n',
        'git-commit/SKILL.md': skillMd('git-commit', 'Write a commit message that says why.', '', 'Imperative mood.'),
        'git-commit/examples/GOOD.txt': 'Retry a refused connection once\n',
        'release-notes/SKILL.md': skillMd('release-notes', 'Draft release notes from merged changes.', '', 'Group by area.')
    },
    beta: {
        'pdf-processing/SKILL.md': skillMd(
            'pdf-processing',
            'Merge and split PDF files.',
            'metadata:\n  owner: beta\n',
            'See reference.md.'
        ),
        'pdf-processing/reference.md': '# Merging\n\nPages keep their order.\n',
        'pdf-processing/logo.png': png(0x62),
        'csv-cleanup/SKILL.md': skillMd('csv-cleanup', 'Normalize CSV files.', '', 'Read references/RULES.md.'),
        'csv-cleanup/references/RULES.md': '# Rules\n\nTrim every cell.\n',
        'data/sql-style/SKILL.md': skillMd('sql-style', 'Format SQL queries.', '', 'Upper-case keywords.'),
        'data/sql-style/references/KEYWORDS.md': 'SELECT FROM WHERE\n'
    }
};

const [configName, transport = 'stdio', portArg = '0'] = process.argv.slice(2);
const files = CONFIGS[configName];
if (files === undefined || !['stdio', 'http'].includes(transport)) {
    process.stderr.write(`usage: node skills_server.mjs (${Object.keys(CONFIGS).join('|')}) (stdio | http [PORT])\n`);
    process.exit(2);
}

const skills = await SkillsExtension.load(memorySkillFiles(files), { pageSize: 2, strict: true });

/** One server instance; the SDK asks for one per connection (stdio) or per request (HTTP). */
function makeServer() {
    const server = new McpServer({ name: `skills-${configName}`, version: '1.0.0' });
    server.registerTool('whoami', { description: 'Says which skills server answered.' }, async () => ({
        content: [{ type: 'text', text: configName }]
    }));
    skills.attach(server);
    return server;
}

if (transport === 'stdio') {
    serveStdio(makeServer);
} else {
    serveHttp(createMcpHandler(makeServer), Number(portArg));
}

/** Streamable HTTP on loopback: each Node request made a web Request for the SDK's handler,
 * and its web Response streamed back (SSE bodies included). */
function serveHttp(handler, port) {
    const httpServer = http.createServer(async (req, res) => {
        try {
            const chunks = [];
            for await (const chunk of req) chunks.push(chunk);
            const body = ['GET', 'HEAD'].includes(req.method) ? undefined : Buffer.concat(chunks);
            const headers = new Headers();
            for (const [key, value] of Object.entries(req.headers)) {
                for (const one of Array.isArray(value) ? value : [value]) headers.append(key, one);
            }
            const request = new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url}`, {
                method: req.method,
                headers,
                body
            });
            const response = await handler.fetch(request);
            res.writeHead(response.status, Object.fromEntries(response.headers.entries()));
            if (response.body) {
                for await (const chunk of response.body) res.write(chunk);
            }
            res.end();
        } catch (error) {
            process.stderr.write(`skills_server: ${error?.stack ?? error}\n`);
            if (!res.headersSent) res.writeHead(500);
            res.end();
        }
    });
    httpServer.listen(port, '127.0.0.1', () => {
        process.stderr.write(`listening on 127.0.0.1:${httpServer.address().port}\n`);
    });
}
