// Package e2e drives the real tandem server with the official OpenAI Go client. It is its own
// module so the client stays out of tandem's dependencies; run it with
//
//	cd e2e && go test ./...          # -short skips the load test
//
// Each test starts serve.Run (what `tandem serve` runs) in-process on a 127.0.0.1 listener,
// on tiny Gemma 4 E2B target and drafter checkpoints generated once by TestMain, and stops it
// through its context, the path SIGINT and SIGTERM take. Everything goes over loopback HTTP.
//
// Covered: chat and text completions, streaming and not, with and without the drafter (the
// outputs must agree); usage, with the speculative statistics read from the raw JSON; stop
// strings; logprobs in both formats; tools rendered into the prompt; API errors (401, 404,
// 400 with both token counts, 413, 429); 32 concurrent streams, each equal to the same
// request run alone, with /metrics adding up; a client disconnecting mid-stream; graceful
// shutdown; no goroutine left behind at the end (goleak); a bounded load test.
//
// Tool calls: random weights never write one, and no prompt can make them. So the parsing
// path is tested through the server's own extension point, its Engine interface: a scripted
// engine emits the token ids of a Gemma 4 thinking block and tool calls, and everything after
// it — detokenizing, chat.OutputParser, the response and SSE formats, the official client's
// decoding — is the production code. With the real engine, the tests check that tools are
// accepted and that the prompt the server counts is the template's rendering with the tools.
package e2e
