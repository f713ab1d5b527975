package gemma4

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"tandem/checkpoint/safetensors"
	"tandem/compute"
	"tandem/compute/cpu"
)

// Bad input gets a clear error and loses nothing; Load never panics. Each
// case builds a tiny checkpoint, breaks it, and checks that Load fails (or
// loads, where the sanitize rules apply) with an error that names the
// problem and where it is, that no mapping of the directory's files is left
// behind, that neither Load nor Inspect changed the directory, and that
// Inspect lists the same problem in its Summary whenever the config is
// readable.

const genPrefix = "model.language_model." // the prefix gen-model writes

// stTensor is one tensor read back from a safetensors file.
type stTensor struct {
	safetensors.Spec
	data []byte
}

// readTensors copies every tensor of a safetensors file into memory.
func readTensors(t *testing.T, path string) []stTensor {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ts []stTensor
	for _, info := range f.Tensors() {
		data, err := f.Data(info.Name)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, stTensor{safetensors.Spec{Name: info.Name, DType: info.DType, Shape: slices.Clone(info.Shape)}, slices.Clone(data)})
	}
	return ts
}

// rewriteWeights rewrites dir/model.safetensors after edit, resizing (zero
// filling) any data that no longer matches its spec.
func rewriteWeights(t *testing.T, dir string, edit func([]stTensor) []stTensor) {
	t.Helper()
	path := filepath.Join(dir, safetensors.SingleFileName)
	ts := edit(readTensors(t, path))
	specs := make([]safetensors.Spec, len(ts))
	for i := range ts {
		specs[i] = ts[i].Spec
		n, err := ts[i].Size()
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(ts[i].data)) != n {
			data := make([]byte, n)
			copy(data, ts[i].data)
			ts[i].data = data
		}
	}
	err := safetensors.WriteFile(path, specs, map[string]string{"format": "pt"}, func(i int, w io.Writer) error {
		_, err := w.Write(ts[i].data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// editTensor applies fix to the tensor called name.
func editTensor(t *testing.T, dir, name string, fix func(*stTensor)) {
	t.Helper()
	rewriteWeights(t, dir, func(ts []stTensor) []stTensor {
		i := slices.IndexFunc(ts, func(x stTensor) bool { return x.Name == name })
		if i < 0 {
			t.Fatalf("no tensor %q to break", name)
		}
		fix(&ts[i])
		return ts
	})
}

// addTensors appends zero-filled BF16 tensors.
func addTensors(t *testing.T, dir string, shapes map[string][]int) {
	t.Helper()
	rewriteWeights(t, dir, func(ts []stTensor) []stTensor {
		for name, shape := range shapes {
			ts = append(ts, stTensor{Spec: safetensors.Spec{Name: name, DType: compute.BF16, Shape: shape}})
		}
		return ts
	})
}

// editTextConfig edits the text_config of dir/config.json.
func editTextConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	editConfig(t, dir, func(top map[string]any) { edit(top["text_config"].(map[string]any)) })
}

func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	edit(top)
	out, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// patchFile overwrites the bytes of the file at path from offset on.
func patchFile(t *testing.T, path string, offset int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, offset); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// headerEnd is the offset of a safetensors file's data section.
func headerEnd(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n uint64
	if err := binary.Read(f, binary.LittleEndian, &n); err != nil {
		t.Fatal(err)
	}
	return 8 + int64(n)
}

// generateTiny writes a tiny preset's checkpoint into a new directory.
func generateTiny(t *testing.T, preset string, opt GenerateOptions) string {
	t.Helper()
	p, err := LookupPreset(preset)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if opt.Seed == 0 {
		opt.Seed = 1
	}
	if err := p.Generate(dir, opt); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mappingsUnder lists this process's memory mappings of files under dir
// (Linux only: nil elsewhere).
func mappingsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if i := strings.Index(line, dir+string(filepath.Separator)); i >= 0 {
			out = append(out, strings.TrimSpace(line[i:]))
		}
	}
	return out
}

// dirDigest is every file under dir with its contents, to check that Load
// and Inspect change nothing.
func dirDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out[path] = string(b)
		return nil
	})
	return out
}

// noPanic runs f and turns a panic into a test failure with its stack.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s panicked: %v\n%s", what, r, debug.Stack())
		}
	}()
	f()
}

func TestLoadRejectsBrokenCheckpoints(t *testing.T) {
	const shared = "layers.7." // a KV-shared layer of gemma4-tiny-e2b
	for _, tc := range []struct {
		name    string
		preset  string                                // default gemma4-tiny-e2b
		shards  int64                                 // MaxShardBytes for Generate (0: one file)
		breakIt func(t *testing.T, dir string) string // returns the directory to load
		// want are substrings of Load's error ("DIR" stands for the
		// directory); none means the checkpoint must load.
		want []string
		// configBroken: Inspect must fail too, with the same text; else it
		// must return a Summary whose Problems hold want.
		configBroken bool
		notes        []string // in Inspect's notes, for checkpoints that load
	}{
		// Weights.
		{
			name: "missing tensor",
			breakIt: func(t *testing.T, dir string) string {
				rewriteWeights(t, dir, func(ts []stTensor) []stTensor {
					return slices.DeleteFunc(ts, func(x stTensor) bool { return x.Name == genPrefix+"layers.3.mlp.up_proj.weight" })
				})
				return dir
			},
			want: []string{"DIR: checkpoint does not match config.json", `missing tensor "model.language_model.layers.3.mlp.up_proj.weight" (want shape [128 64])`},
		},
		{
			name: "tensor with the wrong shape",
			breakIt: func(t *testing.T, dir string) string {
				editTensor(t, dir, genPrefix+"layers.2.self_attn.q_proj.weight", func(x *stTensor) { x.Shape = []int{128, 63} })
				return dir
			},
			want: []string{"DIR: ", `tensor "model.language_model.layers.2.self_attn.q_proj.weight" has shape [128 63], config.json implies [128 64]`},
		},
		{
			name: "tensor with an integer dtype",
			breakIt: func(t *testing.T, dir string) string {
				editTensor(t, dir, genPrefix+"norm.weight", func(x *stTensor) { x.DType = compute.I32 })
				return dir
			},
			want: []string{"DIR: ", `tensor "model.language_model.norm.weight" has dtype I32, want F32, BF16 or F16`},
		},
		{
			name: "unexpected extra tensor",
			breakIt: func(t *testing.T, dir string) string {
				addTensors(t, dir, map[string][]int{genPrefix + "layers.3.self_attn.extra_proj.weight": {4, 4}})
				return dir
			},
			want: []string{"DIR: ", `unexpected tensor "model.language_model.layers.3.self_attn.extra_proj.weight"`},
		},
		{
			name: "KV weights on a KV-shared layer are dropped",
			breakIt: func(t *testing.T, dir string) string {
				addTensors(t, dir, map[string][]int{
					genPrefix + shared + "self_attn.k_proj.weight": {32, 64},
					genPrefix + shared + "self_attn.v_proj.weight": {32, 64},
					genPrefix + shared + "self_attn.k_norm.weight": {32},
				})
				return dir
			},
			notes: []string{`dropped "model.language_model.layers.7.self_attn.k_proj.weight"`, `dropped "model.language_model.layers.7.self_attn.v_proj.weight"`},
		},
		{
			name: "multimodal towers are ignored",
			breakIt: func(t *testing.T, dir string) string {
				addTensors(t, dir, map[string][]int{
					"model.vision_tower.encoder.layers.0.mlp.fc1.weight": {8, 8},
					"model.audio_tower.conformer.0.ffw.weight":           {8},
					"model.embed_vision.embedding_projection.weight":     {64, 8},
					"model.embed_audio.embedding_projection.weight":      {64, 8},
					genPrefix + "layers.0.self_attn.rotary_emb.inv_freq": {16},
				})
				return dir
			},
			notes: []string{"ignored 5 multimodal-tower or buffer tensors"},
		},

		// Config.
		{
			name: "unknown layer type",
			breakIt: func(t *testing.T, dir string) string {
				editTextConfig(t, dir, func(c map[string]any) { c["layer_types"].([]any)[2] = "global_attention" })
				return dir
			},
			want:         []string{"DIR: config.json: invalid Gemma 4 text config", `layer_types[2] = "global_attention" (want sliding_attention or full_attention)`},
			configBroken: true,
		},
		{
			name: "layer_types shorter than num_hidden_layers",
			breakIt: func(t *testing.T, dir string) string {
				editTextConfig(t, dir, func(c map[string]any) { c["layer_types"] = c["layer_types"].([]any)[:9] })
				return dir
			},
			want:         []string{"DIR: config.json: invalid Gemma 4 text config: ", "layer_types has 9 entries, num_hidden_layers is 10"},
			configBroken: true,
		},
		{
			name: "num_hidden_layers disagrees with the weights",
			breakIt: func(t *testing.T, dir string) string {
				editTextConfig(t, dir, func(c map[string]any) {
					c["num_hidden_layers"] = 12
					c["layer_types"] = append(c["layer_types"].([]any), "sliding_attention", "full_attention")
				})
				return dir
			},
			want: []string{"DIR: checkpoint does not match config.json: ",
				"DIR: checkpoint does not match config.json: checkpoint has tensors for layers 0 to 9 (10 layers), config.json has num_hidden_layers 12; ",
				`missing tensor "model.language_model.layers.5.self_attn.k_proj.weight"`},
		},
		{
			name: "hidden_size disagrees with every tensor",
			breakIt: func(t *testing.T, dir string) string {
				editTextConfig(t, dir, func(c map[string]any) { c["hidden_size"] = 80 })
				return dir
			},
			want: []string{"DIR: checkpoint does not match config.json: ",
				"DIR: checkpoint does not match config.json: checkpoint's embed_tokens.weight [512 64] has width 64, config.json has hidden_size 80; ",
				`tensor "model.language_model.embed_tokens.weight" has shape [512 64], config.json implies [512 80]`,
				"; and ", // more problems: TestLoadErrorStaysReadable counts them
			},
		},
		{
			name: "invalid JSON",
			breakIt: func(t *testing.T, dir string) string {
				if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "gemma4", "text_config": {`), 0o644); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			want:         []string{"DIR/config.json: unexpected end of JSON input"},
			configBroken: true,
		},
		{
			name: "config.json missing",
			breakIt: func(t *testing.T, dir string) string {
				if err := os.Remove(filepath.Join(dir, "config.json")); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			want:         []string{"DIR: no config.json: not a Hugging Face model directory"},
			configBroken: true,
		},
		{
			name:    "assistant drafter given as a target",
			preset:  "gemma4-tiny-e2b-assistant",
			breakIt: func(t *testing.T, dir string) string { return dir },
			want:    []string{"DIR: config.json: this is a gemma4_assistant drafter, not a target model"},
		},
		{
			name: "model_type llama",
			breakIt: func(t *testing.T, dir string) string {
				editConfig(t, dir, func(c map[string]any) { c["model_type"] = "llama" })
				return dir
			},
			want:         []string{`DIR: config.json: model_type "llama" is not a Gemma 4 target (want gemma4 or gemma4_text)`},
			configBroken: true,
		},

		// Files.
		{
			name: "weights truncated in the data section",
			breakIt: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, safetensors.SingleFileName)
				h, size := headerEnd(t, path), fileSize(t, path)
				if err := os.Truncate(path, h+(size-h)/2); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			want: []string{"DIR/model.safetensors", "tensor", "data section"},
		},
		{
			name: "weights truncated in the header",
			breakIt: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, safetensors.SingleFileName)
				if err := os.Truncate(path, headerEnd(t, path)/2); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			want: []string{"DIR/model.safetensors", "header longer than the file"},
		},
		{
			name: "header length corrupted to a huge value",
			breakIt: func(t *testing.T, dir string) string {
				patchFile(t, filepath.Join(dir, safetensors.SingleFileName), 0, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
				return dir
			},
			want: []string{"DIR/model.safetensors", "header length 9223372036854775807 exceeds the limit"},
		},
		{
			name: "header length off by a few bytes",
			breakIt: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, safetensors.SingleFileName)
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], uint64(headerEnd(t, path)-8-5))
				patchFile(t, path, 0, b[:])
				return dir
			},
			want: []string{"DIR/model.safetensors", "header"},
		},
		{
			name: "model.safetensors missing",
			breakIt: func(t *testing.T, dir string) string {
				if err := os.Remove(filepath.Join(dir, safetensors.SingleFileName)); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			want: []string{"DIR: no model.safetensors.index.json or model.safetensors"},
		},
		{
			name:   "index lists a missing shard",
			shards: 512 << 10,
			breakIt: func(t *testing.T, dir string) string {
				shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
				if len(shards) < 2 {
					t.Fatalf("want several shards, got %v", shards)
				}
				if err := os.Remove(shards[1]); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			want: []string{"DIR/model.safetensors.index.json: shard DIR/model-00002-of-", " is missing"},
		},
		{
			name:   "shard truncated",
			shards: 512 << 10,
			breakIt: func(t *testing.T, dir string) string {
				shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
				if err := os.Truncate(shards[0], fileSize(t, shards[0])-1); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			want: []string{"DIR/model-00001-of-", "data section"},
		},
		{
			name:         "directory does not exist",
			breakIt:      func(t *testing.T, dir string) string { return filepath.Join(dir, "nope") },
			want:         []string{"model directory DIR/nope does not exist"},
			configBroken: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			preset := tc.preset
			if preset == "" {
				preset = "gemma4-tiny-e2b"
			}
			base := generateTiny(t, preset, GenerateOptions{MaxShardBytes: tc.shards})
			dir := tc.breakIt(t, base)
			before := dirDigest(t, base)
			want := make([]string, len(tc.want))
			for i, w := range tc.want {
				want[i] = strings.ReplaceAll(w, "DIR", base)
			}

			var m *Model
			var err error
			noPanic(t, "Load", func() { m, err = Load(dir, cpu.New(1)) })
			if len(want) == 0 {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				if err == nil {
					m.Close()
					t.Fatalf("Load succeeded, want an error containing %q", want)
				}
				t.Logf("Load: %v", err)
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Load error\n\t%v\ndoes not contain\n\t%s", err, w)
					}
				}
			}
			if maps := mappingsUnder(base); len(maps) > 0 {
				t.Errorf("Load left the checkpoint mapped: %v", maps)
			}

			var s *Summary
			noPanic(t, "Inspect", func() { s, err = Inspect(dir) })
			switch {
			case tc.configBroken:
				if err == nil {
					t.Fatalf("Inspect succeeded (problems %q), want an error", s.Problems)
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Inspect error\n\t%v\ndoes not contain\n\t%s", err, w)
					}
				}
			case err != nil:
				t.Fatalf("Inspect: %v", err)
			case len(want) == 0:
				if len(s.Problems) > 0 {
					t.Errorf("Inspect lists problems %q for a checkpoint that loads", s.Problems)
				}
				for _, n := range tc.notes {
					if !slices.ContainsFunc(s.Notes, func(x string) bool { return strings.Contains(x, n) }) {
						t.Errorf("Inspect notes %q lack %q", s.Notes, n)
					}
				}
			case strings.HasSuffix(preset, "-assistant"):
				if s.Kind != "assistant" || len(s.Problems) > 0 {
					t.Errorf("Inspect of a drafter: kind %q, problems %q", s.Kind, s.Problems)
				}
			default:
				all := strings.Join(s.Problems, "\n")
				for _, w := range want {
					// Load's "DIR: checkpoint does not match config.json:"
					// preamble is not a problem of its own.
					w = strings.TrimSuffix(strings.TrimPrefix(w, base+": checkpoint does not match config.json: "), "; ")
					if strings.HasPrefix(w, "; and ") || strings.HasPrefix(w, base+": ") {
						continue
					}
					if !strings.Contains(all, w) {
						t.Errorf("Inspect problems\n\t%s\ndo not contain\n\t%s", strings.ReplaceAll(all, "\n", "\n\t"), w)
					}
				}
			}
			if maps := mappingsUnder(base); len(maps) > 0 {
				t.Errorf("Inspect left the checkpoint mapped: %v", maps)
			}
			if after := dirDigest(t, base); !reflect.DeepEqual(before, after) {
				t.Errorf("Load or Inspect changed the checkpoint directory")
			}
		})
	}
}

func TestLoadErrorStaysReadable(t *testing.T) {
	// A config that disagrees with every tensor lists at most 20 problems,
	// then how many more there are, in an error of a readable size.
	dir := generateTiny(t, "gemma4-tiny-e2b", GenerateOptions{})
	editTextConfig(t, dir, func(c map[string]any) { c["hidden_size"] = 80 })
	_, err := Load(dir, cpu.New(1))
	if err == nil {
		t.Fatal("Load succeeded with a hidden_size every tensor disagrees with")
	}
	msg := err.Error()
	s, ierr := Inspect(dir)
	if ierr != nil {
		t.Fatal(ierr)
	}
	total := len(s.Problems)
	if total <= 20 {
		t.Fatalf("only %d problems; the test needs more than 20", total)
	}
	listed := strings.Count(msg, "; ")
	if !strings.HasSuffix(msg, fmt.Sprintf("; and %d more", total-20)) || listed != 20 {
		t.Errorf("error lists %d problems and ends %q; want 20 then \"and %d more\"", listed, msg[max(0, len(msg)-40):], total-20)
	}
	if len(msg) > 3000 {
		t.Errorf("error is %d bytes long", len(msg))
	}
}

// bigVocabTiny is gemma4-tiny-e2b with a vocabulary large enough that its
// embeddings dominate the checkpoint, as they do in the real models.
func bigVocabTiny(t *testing.T) (dir string, size int64) {
	t.Helper()
	p, err := LookupPreset("gemma4-tiny-e2b")
	if err != nil {
		t.Fatal(err)
	}
	tc := *p.Target
	tc.VocabSize, tc.VocabSizePerLayerInput = 32768, 32768
	p.Target = &tc
	dir = filepath.Join(t.TempDir(), "ckpt")
	if err := p.Generate(dir, GenerateOptions{Seed: 1, DType: compute.BF16}); err != nil {
		t.Fatal(err)
	}
	return dir, fileSize(t, filepath.Join(dir, safetensors.SingleFileName))
}

func TestLoadUsesWeightsInPlace(t *testing.T) {
	// On the CPU a checkpoint is used from its memory map: loading copies
	// no tensor, so it allocates far less than the checkpoint's size.
	dir, size := bigVocabTiny(t)
	b := cpu.New(1)
	// Warm up once (first-use allocations of the packages involved).
	m, err := Load(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err = Load(dir, b)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	alloc := int64(after.TotalAlloc - before.TotalAlloc)
	embed := int64(m.Config.Text.VocabSize * m.Config.Text.HiddenSize * 2)
	t.Logf("Load allocated %d bytes for a %d-byte checkpoint (tied embedding %d bytes)", alloc, size, embed)
	if alloc > size/2 || alloc > embed/2 {
		t.Errorf("Load allocated %d bytes: a %d-byte checkpoint (embedding %d bytes) was copied, not mapped", alloc, size, embed)
	}
}

// tensorData is the address and byte length of a CPU tensor's storage.
func tensorData(t *compute.Tensor) (uintptr, int) {
	switch d := t.Data().(type) {
	case []uint16:
		return uintptr(unsafe.Pointer(unsafe.SliceData(d))), 2 * len(d)
	case []float32:
		return uintptr(unsafe.Pointer(unsafe.SliceData(d))), 4 * len(d)
	}
	panic(fmt.Sprintf("unexpected storage %T", t.Data()))
}

func TestLoadedWeightsStayMapped(t *testing.T) {
	// Every weight tensor of a loaded model, the per-layer embeddings and
	// the tied embedding (the LM head) first, is a view of its checkpoint
	// bytes; Close unmaps them.
	dir := generateTiny(t, "gemma4-tiny-e2b", GenerateOptions{})
	m, err := Load(dir, cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			m.Close()
		}
	}()
	inPlace := func(what string, w *compute.Tensor, name string) {
		t.Helper()
		data, err := m.set.Data(name)
		if err != nil {
			t.Fatal(err)
		}
		p, n := tensorData(w)
		if p != uintptr(unsafe.Pointer(unsafe.SliceData(data))) || n != len(data) {
			t.Errorf("%s is not the checkpoint's bytes of %q in place", what, name)
		}
	}
	inPlace("the tied embedding / LM head", m.embed, genPrefix+"embed_tokens.weight")
	inPlace("the per-layer embedding", m.pleEmbed, genPrefix+"embed_tokens_per_layer.weight")
	inPlace("the per-layer projection", m.pleProj, genPrefix+"per_layer_model_projection.weight")

	// Every other tensor field of the model and its layers points into
	// some tensor's mapped bytes.
	type span struct{ lo, hi uintptr }
	var spans []span
	for _, info := range m.set.Tensors() {
		data, _ := m.set.Data(info.Name)
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
		spans = append(spans, span{lo, lo + uintptr(len(data))})
	}
	tensorType := reflect.TypeFor[*compute.Tensor]()
	checked := 0
	checkFields := func(where string, v reflect.Value) {
		for i := range v.NumField() {
			f := v.Field(i)
			if f.Type() != tensorType || f.IsNil() {
				continue
			}
			p, _ := tensorData((*compute.Tensor)(f.UnsafePointer()))
			if !slices.ContainsFunc(spans, func(s span) bool { return p >= s.lo && p < s.hi }) {
				t.Errorf("%s.%s is not in the checkpoint's mapping", where, v.Type().Field(i).Name)
			}
			checked++
		}
	}
	checkFields("Model", reflect.ValueOf(m).Elem())
	for i := range m.layers {
		checkFields(fmt.Sprintf("layers[%d]", i), reflect.ValueOf(&m.layers[i]).Elem())
	}
	if checked < 10*len(m.layers) {
		t.Fatalf("checked only %d weight tensors", checked)
	}

	// A forward pass reads through the mapping.
	out, err := m.Forward([]Row{{Tokens: []int32{2, 17, 300}, Cache: m.NewCache(3)}}, ForwardOptions{Logits: LogitsLast})
	if err != nil || out.Logits.Dim(1) != m.Config.Text.VocabSize {
		t.Fatalf("forward: %v", err)
	}

	maps := mappingsUnder(dir)
	if runtime.GOOS == "linux" && len(maps) == 0 {
		t.Fatalf("no mapping of %s in /proc/self/maps while the model is open", dir)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if maps := mappingsUnder(dir); len(maps) > 0 {
		t.Errorf("Close left the checkpoint mapped: %v", maps)
	}
	if _, err := m.set.Data(genPrefix + "embed_tokens.weight"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("tensor data after Close: %v, want a closed-file error", err)
	}
}

func TestLoadRejectsTruncationAnywhere(t *testing.T) {
	// Cutting model.safetensors at any point is an error naming the file,
	// never a panic or a model reading past the end of the mapping.
	dir := generateTiny(t, "gemma4-tiny-e2b", GenerateOptions{})
	path := filepath.Join(dir, safetensors.SingleFileName)
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := headerEnd(t, path)
	for _, n := range []int64{0, 1, 7, 8, 9, h / 2, h - 1, h, h + 1, (h + int64(len(full))) / 2, int64(len(full)) - 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			if err := os.WriteFile(path, full[:n], 0o644); err != nil {
				t.Fatal(err)
			}
			var err error
			noPanic(t, "Load", func() { _, err = Load(dir, cpu.New(1)) })
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("Load of a file cut at %d of %d bytes: %v, want an error naming %s", n, len(full), err, path)
			}
			if msg := err.Error(); !strings.Contains(msg, "truncated") && !strings.Contains(msg, "header") && !strings.Contains(msg, "data section") {
				t.Errorf("error does not say what is wrong: %v", err)
			}
		})
	}
}
