// Package checkpoint reads the files of a Hugging Face model directory that
// are not weights: config.json and generation_config.json. Weights are read by
// the safetensors subpackage.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Config is a model directory's config.json, kept raw for the model package
// that understands it.
type Config struct {
	Path      string
	ModelType string
	Raw       []byte
}

// ReadConfig reads dir/config.json and its model_type.
func ReadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if st, serr := os.Stat(dir); serr != nil || !st.IsDir() {
			return nil, fmt.Errorf("model directory %s does not exist", dir)
		}
		return nil, fmt.Errorf("%s: no config.json: not a Hugging Face model directory", dir)
	}
	if err != nil {
		return nil, err
	}
	var head struct {
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if head.ModelType == "" {
		return nil, fmt.Errorf("%s: no model_type", path)
	}
	return &Config{Path: path, ModelType: head.ModelType, Raw: raw}, nil
}

// GenerationConfig is the part of generation_config.json Tandem uses.
type GenerationConfig struct {
	BOSTokenID  *int     `json:"bos_token_id,omitempty"`
	EOSTokenIDs IDList   `json:"eos_token_id,omitempty"`
	PadTokenID  *int     `json:"pad_token_id,omitempty"`
	DoSample    *bool    `json:"do_sample,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	MinP        *float64 `json:"min_p,omitempty"`
}

// IDList is a token id list that JSON may spell as one number or a list.
type IDList []int

// UnmarshalJSON accepts 1, [1, 106] and null.
func (ids *IDList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*ids = nil
		return nil
	}
	var one int
	if err := json.Unmarshal(b, &one); err == nil {
		*ids = IDList{one}
		return nil
	}
	var many []int
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("want a token id or a list of ids, got %s", b)
	}
	*ids = many
	return nil
}

// ReadGenerationConfig reads dir/generation_config.json; a missing file
// gives (nil, nil).
func ReadGenerationConfig(dir string) (*GenerationConfig, error) {
	path := filepath.Join(dir, "generation_config.json")
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var g GenerationConfig
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &g, nil
}

// WriteJSON writes v as indented JSON to path, atomically.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
