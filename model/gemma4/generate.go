package gemma4

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"tandem/chat"
	"tandem/checkpoint"
	"tandem/checkpoint/safetensors"
	"tandem/compute"
	"tandem/tokenizer"
)

// GenerateOptions controls random-weight checkpoint generation.
type GenerateOptions struct {
	Seed  uint64
	DType compute.DType // F32, BF16 or F16 for float weights
	// MaxShardBytes splits weights into shards plus an index when the
	// total is larger (0: DefaultShardBytes; negative: never shard).
	MaxShardBytes int64
	// Progress, if set, is called with bytes written so far and the total.
	Progress func(done, total int64)
	// TokenizerDir, if set, is a directory whose tokenizer files are copied
	// (tokenizer.json required); otherwise a synthetic Gemma-family
	// tokenizer of the model's vocabulary is written, with the Gemma 4 chat
	// template.
	TokenizerDir string
}

// DefaultShardBytes is HF's classic shard size.
const DefaultShardBytes = 5 << 30

// TransformersVersion is written into generated configs: the version of HF
// transformers our oracle scripts run.
const TransformersVersion = "5.17.0"

// Weights lists the preset's tensors in checkpoint order.
func (p Preset) Weights() []Weight {
	if p.Assistant != nil {
		return AssistantWeights(p.Assistant)
	}
	return TargetWeights(p.Target, Prefixes[0])
}

// Generate writes a random-weight checkpoint of the preset into dir in the
// HF layout: config.json, generation_config.json and model.safetensors (or
// shards and model.safetensors.index.json). The same seed always gives the
// same bytes, whatever the shard size; values of a BF16 checkpoint are those
// of the F32 one, rounded.
func (p Preset) Generate(dir string, opt GenerateOptions) error {
	if opt.DType == compute.Invalid {
		opt.DType = compute.BF16
	}
	if !opt.DType.IsFloat() {
		return fmt.Errorf("gen-model: dtype %s is not a float type (want BF16, F16 or F32)", opt.DType)
	}
	if opt.MaxShardBytes == 0 {
		opt.MaxShardBytes = DefaultShardBytes
	}
	if opt.TokenizerDir != "" {
		// Check it before writing anything.
		if _, err := tokenizer.LoadDir(opt.TokenizerDir); err != nil {
			return fmt.Errorf("gen-model: --tokenizer %s: %w", opt.TokenizerDir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("gen-model: %w", err)
	}
	if err := p.writeConfigs(dir, opt.DType); err != nil {
		return fmt.Errorf("gen-model: %w", err)
	}
	if err := p.writeTokenizer(dir, opt.TokenizerDir); err != nil {
		return fmt.Errorf("gen-model: %w", err)
	}
	ws := p.Weights()
	specs := make([]safetensors.Spec, len(ws))
	var total int64
	for i, w := range ws {
		dt := opt.DType
		if w.Int {
			dt = compute.I64 // HF stores token_ordering as int64
		}
		specs[i] = safetensors.Spec{Name: w.Name, DType: dt, Shape: w.Shape}
		total += w.Bytes(opt.DType)
	}
	var done int64
	fill := func(i int, out io.Writer) error {
		n, err := fillTensor(out, ws[i], specs[i].DType, opt.Seed, func(n int64) {
			if opt.Progress != nil {
				opt.Progress(done+n, total)
			}
		})
		done += n
		return err
	}
	if err := safetensors.WriteSharded(dir, specs, map[string]string{"format": "pt"}, opt.MaxShardBytes, fill); err != nil {
		return fmt.Errorf("gen-model: %w", err)
	}
	return nil
}

func (p Preset) writeConfigs(dir string, dt compute.DType) error {
	torchDType := map[compute.DType]string{compute.BF16: "bfloat16", compute.F16: "float16", compute.F32: "float32"}[dt]
	var cfg any
	if a := p.Assistant; a != nil {
		cfg = struct {
			Architectures []string `json:"architectures"`
			*AssistantConfig
			DType               string `json:"dtype"`
			TransformersVersion string `json:"transformers_version"`
		}{[]string{"Gemma4AssistantForCausalLM"}, a, torchDType, TransformersVersion}
	} else {
		cfg = struct {
			Architectures       []string    `json:"architectures"`
			ModelType           string      `json:"model_type"`
			Text                *TextConfig `json:"text_config"`
			VisionConfig        any         `json:"vision_config"`
			AudioConfig         any         `json:"audio_config"`
			TieWordEmbeddings   bool        `json:"tie_word_embeddings"`
			DType               string      `json:"dtype"`
			TransformersVersion string      `json:"transformers_version"`
		}{[]string{"Gemma4ForConditionalGeneration"}, TypeWrapper, p.Target, nil, nil, true, torchDType, TransformersVersion}
	}
	if err := checkpoint.WriteJSON(dir+"/config.json", cfg); err != nil {
		return err
	}
	bos, pad := 2, 0
	gen := struct {
		checkpoint.GenerationConfig
		TransformersVersion string `json:"transformers_version"`
	}{checkpoint.GenerationConfig{
		BOSTokenID: &bos, PadTokenID: &pad, EOSTokenIDs: checkpoint.IDList(StopTokens),
		DoSample: ptr(true), Temperature: ptr(1.0), TopK: ptr(64), TopP: ptr(0.95),
	}, TransformersVersion}
	return checkpoint.WriteJSON(dir+"/generation_config.json", gen)
}

// tokenizerFiles are what a model directory's tokenizer consists of.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "chat_template.json"}

// writeTokenizer copies a real tokenizer from src, or writes a synthetic one.
func (p Preset) writeTokenizer(dir, src string) error {
	for _, f := range tokenizerFiles {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if src != "" {
		// A real tokenizer may list a few more ids than the embedding has
		// rows (Gemma 3's has 262145 for 262144); the model rejects such
		// ids when they reach it.
		for _, f := range tokenizerFiles {
			b, err := os.ReadFile(filepath.Join(src, f))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	tj, cj, err := tokenizer.Synthetic("gemma", p.vocabSize())
	if err != nil {
		return err
	}
	// One Gemma 4 template for the project: chat_template.jinja, which HF
	// prefers over tokenizer_config.json's own.
	var cfg map[string]any
	if err := json.Unmarshal(cj, &cfg); err != nil {
		return err
	}
	delete(cfg, "chat_template")
	if err := checkpoint.WriteJSON(filepath.Join(dir, "tokenizer_config.json"), cfg); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(chat.Gemma4Template), 0o644)
}

func (p Preset) vocabSize() int {
	if p.Assistant != nil {
		return p.Assistant.Text.VocabSize
	}
	return p.Target.VocabSize
}

// fillBlock is the number of values one RNG stream produces; blocks are
// generated in parallel and written in order.
const fillBlock = 1 << 20

// fillTensor writes w's random values in dtype dt and returns the bytes
// written. Each block of values has its own RNG stream keyed by (seed,
// tensor name, block), so output is independent of scheduling.
func fillTensor(out io.Writer, w Weight, dt compute.DType, seed uint64, progress func(int64)) (int64, error) {
	n := compute.NumElements(w.Shape)
	key := streamKey(seed, w.Name)
	if w.Int {
		r := rand.New(rand.NewPCG(key, 0))
		perm := r.Perm(n)
		buf := make([]byte, 0, n*dt.Size())
		for _, v := range perm {
			switch dt {
			case compute.I64:
				buf = binary.LittleEndian.AppendUint64(buf, uint64(v))
			case compute.I32:
				buf = binary.LittleEndian.AppendUint32(buf, uint32(v))
			default:
				return 0, fmt.Errorf("tensor %q: permutation needs an integer dtype, got %s", w.Name, dt)
			}
		}
		_, err := out.Write(buf)
		progress(int64(len(buf)))
		return int64(len(buf)), err
	}
	workers := runtime.GOMAXPROCS(0)
	buf := make([]byte, min(n, workers*fillBlock)*dt.Size()) // a wave of blocks, or the whole tensor
	var written int64
	blocks := (n + fillBlock - 1) / fillBlock
	for wave := 0; wave < blocks; wave += workers {
		first := wave * fillBlock
		cnt := min(workers*fillBlock, n-first)
		fillFloats(buf[:cnt*dt.Size()], w, dt, key, wave, workers)
		if _, err := out.Write(buf[:cnt*dt.Size()]); err != nil {
			return written, err
		}
		written += int64(cnt * dt.Size())
		progress(written)
	}
	return written, nil
}

// fillFloats writes w's values for blocks first, first+1, … into dst
// (whole blocks but the tensor's last) with up to workers goroutines
// taking blocks in turn. Block b's values come from its own stream
// (key, b), so they do not depend on the scheduling.
func fillFloats(dst []byte, w Weight, dt compute.DType, key uint64, first, workers int) {
	a := w.Std * math.Sqrt(3) // uniform on [−a, a] has standard deviation Std
	center := w.Mean
	n := len(dst) / dt.Size()
	blocks := (n + fillBlock - 1) / fillBlock
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, blocks) {
		wg.Go(func() {
			for {
				j := int(next.Add(1) - 1)
				if j >= blocks {
					return
				}
				r := rand.New(rand.NewPCG(key, uint64(first+j)))
				lo := j * fillBlock
				buf := dst[lo*dt.Size():]
				for k := range min(fillBlock, n-lo) {
					// The conversion keeps the product from being fused into
					// a multiply-add (Go may fuse on arm64 and amd64 v3),
					// so every host, and the GPU's random_uniform, rounds
					// the same two operations.
					compute.PutFloat(buf, k, float32(center+float64(a*(2*r.Float64()-1))), dt)
				}
			}
		})
	}
	wg.Wait()
}

// randomBytes is the bytes fillTensor would write for w, made with every
// core at once (for randomSource, which keeps whole tensors in memory).
func randomBytes(w Weight, dt compute.DType, seed uint64) ([]byte, error) {
	if w.Int {
		var buf bytes.Buffer
		_, err := fillTensor(&buf, w, dt, seed, func(int64) {})
		return buf.Bytes(), err
	}
	dst := make([]byte, compute.NumElements(w.Shape)*dt.Size())
	fillFloats(dst, w, dt, streamKey(seed, w.Name), 0, runtime.GOMAXPROCS(0))
	return dst, nil
}

func streamKey(seed uint64, name string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(name))
	return h.Sum64()
}
