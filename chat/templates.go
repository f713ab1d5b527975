package chat

import _ "embed"

// Gemma4Template is a chat template in Gemma 4's format (spec §6.1), written
// for this project: gen-model ships it with the random-weight Gemma 4
// presets, and its rendering is checked against HF's Jinja
// implementations (testdata/chat/reference-gemma4.json).
//
//go:embed templates/gemma4.jinja
var Gemma4Template string
